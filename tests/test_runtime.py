import os
import subprocess
import sys

import numpy as np
import pytest

import course_lib as cl
from course_lib import runtime, scale

HERE = {"PYTHONPATH": os.path.dirname(os.path.abspath(__file__))}   # children import this file


def test_setup_reports_cpu_and_scale(capsys):
    info = cl.setup(device="cpu", mode="graph", seed=3)
    out = capsys.readouterr().out
    assert info.device == "CPU" and info.mode == "graph" and info.scale == "ci"
    assert "MindSpore 2.7.0" in out and "device CPU" in out and "COURSE_SCALE=ci" in out
    import mindspore as ms
    assert ms.get_context("mode") == ms.GRAPH_MODE


def test_unknown_device_name_is_a_clear_error():
    with pytest.raises(ValueError, match="Unknown device 'TPU'"):
        cl.setup(device="TPU")


def test_unsupported_device_says_what_is_available():
    with pytest.raises(RuntimeError, match=r"only supports \['CPU'\]"):
        cl.setup(device="Ascend")


def test_env_override_is_used(monkeypatch):
    monkeypatch.setenv("COURSE_DEVICE", "Ascend")
    with pytest.raises(RuntimeError, match="Ascend was requested"):
        runtime.choose_device()
    monkeypatch.setenv("COURSE_DEVICE", "cpu")
    assert runtime.choose_device() == "CPU"


def test_unknown_mode_rejected():
    with pytest.raises(ValueError, match="Unknown mode"):
        cl.setup(mode="eager")


def test_seed_everything_makes_mindspore_and_numpy_repeatable():
    import mindspore as ms
    from mindspore import ops
    draws = []
    for _ in range(2):
        cl.seed_everything(7)
        draws.append((np.random.rand(3), ops.uniform((3,), ms.Tensor(0.0), ms.Tensor(1.0)).asnumpy()))
    np.testing.assert_array_equal(draws[0][0], draws[1][0])
    np.testing.assert_array_equal(draws[0][1], draws[1][1])


def test_scale_knob(monkeypatch):
    monkeypatch.setenv("COURSE_SCALE", "full")
    assert cl.pick(ci=1, full=2) == 2
    monkeypatch.setenv("COURSE_SCALE", "ci")
    assert cl.pick(ci=1, full=2) == 1
    monkeypatch.setenv("COURSE_SCALE", "huge")
    with pytest.raises(ValueError, match="not a known scale"):
        scale.current_scale()


def test_import_quiets_glog_and_sets_offline_before_mindspore():
    code = ("import os; os.environ.pop('GLOG_v', None); os.environ.pop('HF_HUB_OFFLINE', None);"
            "import course_lib, sys; assert 'mindspore' not in sys.modules or True;"
            "print(os.environ['GLOG_v'], os.environ['HF_HUB_OFFLINE'])")
    env = {k: v for k, v in os.environ.items() if k not in ("GLOG_v", "HF_HUB_OFFLINE")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.stdout.split() == ["3", "1"], out.stderr


def test_interactive_flag(monkeypatch):
    monkeypatch.setenv("COURSE_HEADLESS", "1")
    assert not cl.interactive()
    monkeypatch.setenv("COURSE_HEADLESS", "0")
    assert cl.interactive()


def test_cache_dir_override(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_CACHE_DIR", str(tmp_path))
    assert cl.cache_dir("a", "b") == tmp_path / "a" / "b"
    assert (tmp_path / "a" / "b").is_dir()


@pytest.mark.parametrize("start", ["graph", "pynative"])
def test_execution_mode_switches_and_restores_even_on_error(start):
    import mindspore as ms
    value = {"graph": ms.GRAPH_MODE, "pynative": ms.PYNATIVE_MODE}
    other = "pynative" if start == "graph" else "graph"
    ms.set_context(mode=value[start])
    with runtime.execution_mode(other):
        assert ms.get_context("mode") == value[other]
    assert ms.get_context("mode") == value[start]
    with pytest.raises(KeyError):
        with runtime.execution_mode(other):
            raise KeyError("boom")
    assert ms.get_context("mode") == value[start]
    with pytest.raises(ValueError, match="Unknown mode 'eager'"):
        with runtime.execution_mode("eager"):
            pass
    ms.set_context(mode=ms.PYNATIVE_MODE)


@pytest.mark.parametrize("training", [True, False])
def test_eval_mode_turns_training_off_and_restores_the_flag(training):
    from mindspore import nn
    net = nn.SequentialCell(nn.Dense(2, 2), nn.Dropout(p=0.5))
    net.set_train(training)
    with pytest.raises(RuntimeError):
        with runtime.eval_mode(net) as inside:
            assert inside is net and net.training is False and net[1].training is False
            raise RuntimeError("boom")
    assert net.training is training and net[1].training is training


def test_eval_mode_passes_a_plain_callable_through():
    def f(x):
        return x
    with runtime.eval_mode(f) as inside:
        assert inside is f


def _child_pid_and_sum(a, b):        # run by run_isolated in a fresh interpreter
    return {"pid": os.getpid(), "sum": a + b, "mindspore_loaded": "mindspore" in sys.modules}


def _child_fails(code):
    sys.stderr.write("child says hello\n")
    sys.exit(code)


def _child_sleeps(seconds):
    import time
    time.sleep(seconds)


def test_run_isolated_runs_in_another_process_and_returns_the_value():
    out = runtime.run_isolated(_child_pid_and_sum, a=2, b=3, timeout=120, env=HERE)
    assert out == {"pid": out["pid"], "sum": 5, "mindspore_loaded": False}
    assert out["pid"] != os.getpid()
    job = runtime.run_isolated(_child_pid_and_sum, a=[1], b=[2], background=True,
                               timeout=120, env=HERE)
    assert isinstance(job, runtime.Isolated) and job.result()["sum"] == [1, 2]


def test_run_isolated_reports_failure_timeout_and_bad_functions():
    with pytest.raises(runtime.IsolatedError, match=r"(?s)exit code 3.*child says hello") as err:
        runtime.run_isolated(_child_fails, code=3, timeout=120, env=HERE)
    assert err.value.exit_code == 3
    with pytest.raises(RuntimeError, match="did not finish within 1 s"):
        runtime.run_isolated(_child_sleeps, seconds=60, timeout=1, env=HERE)
    with pytest.raises(ValueError, match="top level of an importable module"):
        runtime.run_isolated(lambda: 1)
    with pytest.raises(TypeError, match="as JSON"):
        runtime.run_isolated(_child_pid_and_sum, a=object(), b=1)


def _child_cwd_and_stdin():
    return {"cwd": os.getcwd(), "stdin": sys.stdin.read(), "group_leader": os.getpgrp() == os.getpid()}


def _child_starts_a_sleeper_then_hangs(pid_file):
    import time
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    with open(pid_file, "w") as f:
        f.write(str(sleeper.pid))
    time.sleep(120)


def test_run_isolated_cwd_no_stdin_and_own_process_group(tmp_path):
    out = runtime.run_isolated(_child_cwd_and_stdin, timeout=120, env=HERE, cwd=tmp_path)
    assert out == {"cwd": str(tmp_path), "stdin": "", "group_leader": True}
    with pytest.raises(NotADirectoryError, match="not a directory"):
        runtime.run_isolated(_child_cwd_and_stdin, env=HERE, cwd=tmp_path / "missing")


def test_a_timeout_kills_what_the_child_started(tmp_path):
    """IsolatedTimeout (a RuntimeError) and the child's own children die with it."""
    import time
    pid_file = tmp_path / "sleeper.pid"
    job = runtime.run_isolated(_child_starts_a_sleeper_then_hangs, pid_file=str(pid_file),
                               timeout=60, env=HERE, background=True)
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() - job.started < 50, "the child never started its sleeper"
        time.sleep(0.1)
    job.timeout = time.monotonic() - job.started + 0.5      # expire half a second from now
    with pytest.raises(runtime.IsolatedTimeout, match="did not finish within"):
        job.result()
    sleeper = int(pid_file.read_text())
    for _ in range(50):                     # reaped by init once its parent is gone
        try:
            os.kill(sleeper, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"the child's sleeper {sleeper} outlived the timeout")


def test_shown_hides_the_machines_paths(tmp_path, monkeypatch):
    """Stored outputs read the same on every machine: the checkout and the cache folder are
    printed as . and .cache (tests/test_book_reads_well.py refuses machine paths)."""
    from pathlib import Path
    import course_lib as cl
    root = Path(cl.__file__).resolve().parents[1]
    assert cl.shown(root / ".cache" / "ch07" / "m") == "./.cache/ch07/m"
    assert cl.shown(f"{root}/.venv/bin/msrun --out {root}/.cache/x") == "./.venv/bin/msrun --out ./.cache/x"
    monkeypatch.setenv("COURSE_CACHE_DIR", str(tmp_path))
    assert cl.shown(f"saved to {tmp_path}/ch07") == "saved to .cache/ch07"
    assert cl.shown("/etc/hosts") == "/etc/hosts"


def test_turn_order_reverses_every_other_round():
    assert [runtime.turn_order("abc", r) for r in range(3)] == [list("abc"), list("cba"), list("abc")]
    assert runtime.turn_order({"x": 1, "y": 2}, 1) == ["y", "x"]
