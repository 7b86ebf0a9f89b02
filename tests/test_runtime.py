import os
import subprocess
import sys

import numpy as np
import pytest

import course_lib as cl
from course_lib import runtime, scale


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
