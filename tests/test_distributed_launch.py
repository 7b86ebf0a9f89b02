"""The msrun launcher: command line, log parsing, and — with real msrun runs of a
MindSpore-free worker script (a few seconds each) — success, a crashing worker and a hang,
each leaving no process of the run alive."""
import socket
import textwrap

import pytest

from course_lib.distributed import launch
from course_lib.distributed.launch import MsrunError, run_msrun

# What every process msrun starts runs: the scheduler (MS_ROLE=MS_SCHED) and each worker.
FAKE_WORKER = textwrap.dedent("""
    import os, sys, time
    from course_lib.distributed.launch import emit
    role, rank, mode = os.environ.get("MS_ROLE"), int(os.environ.get("RANK_ID", "-1")), sys.argv[1]
    if role == "MS_SCHED":
        if mode == "hang":
            time.sleep(600)
        sys.exit(0)
    emit(kind="hello", rank=rank, world=int(os.environ["RANK_SIZE"]))
    if mode == "fail" and rank == 1:
        raise RuntimeError("rank 1 broke on purpose")
    if mode in ("hang", "fail"):
        time.sleep(600)           # rank 0 would wait for ever for its peer
""")


@pytest.fixture
def fake(tmp_path):
    path = tmp_path / "fake_worker.py"
    path.write_text(FAKE_WORKER)
    return path


def assert_nothing_left(result):
    assert result.run_id
    assert launch.run_processes(result.run_id) == []


def test_free_port_is_bindable():
    port = launch.free_port()
    assert 1024 <= port <= 65535
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


def test_msrun_command_flags():
    cmd = launch.msrun_command(["python", "-m", "pkg.mod", "--steps", "3"], worker_num=8,
                               master_port=9000, log_dir="L")
    assert cmd[:6] == ["msrun", "--worker_num=8", "--local_worker_num=8", "--master_port=9000",
                       "--log_dir=L", "--join=True"]
    assert cmd[-5:] == ["python", "-m", "pkg.mod", "--steps", "3"]
    multi = launch.msrun_command(["train.py"], worker_num=16, local_worker_num=8,
                                 master_addr="10.0.0.1", node_rank=1)
    assert "--local_worker_num=8" in multi and "--master_addr=10.0.0.1" in multi
    assert "--node_rank=1" in multi


@pytest.mark.parametrize("kwargs, match", [
    (dict(target=[]), "target is empty"),
    (dict(target=["x.py"], worker_num=0), "worker_num must be a positive int"),
    (dict(target=["x.py"], worker_num=2, local_worker_num=3), "local_worker_num=3"),
    (dict(target=["x.py"], master_port=80), "master_port must be in 1024..65535"),
])
def test_msrun_command_rejects_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        launch.msrun_command(**kwargs)


def test_records_and_clean_log(capsys):
    launch.emit(kind="end", rank=1, loss=1.5)
    printed = capsys.readouterr().out
    log = ("[INFO] PS(1,2,python):2026 noise\n" + printed
           + "@course {\"cut\": \n" + "plain print\n")
    assert launch.parse_records(log) == [{"kind": "end", "rank": 1, "loss": 1.5}]
    assert launch.clean_log(log).splitlines() == [printed.strip(), "@course {\"cut\": ", "plain print"]


def test_run_msrun_rejects_bad_timeout(fake):
    with pytest.raises(ValueError, match="timeout must be > 0"):
        run_msrun(["python", str(fake), "ok"], 2, timeout=0)


@pytest.mark.slow
def test_two_workers_succeed_and_report(fake, tmp_path):
    result = run_msrun(["python", str(fake), "ok"], 2, log_dir=tmp_path / "logs", timeout=120)
    assert result.ok and result.returncode == 0 and not result.timed_out
    assert sorted(result.logs) == [0, 1]
    hellos = result.records(kind="hello")
    assert sorted(r["rank"] for r in hellos) == [0, 1]
    assert all(r["world"] == 2 for r in hellos)
    assert result.records(rank=1) == [{"kind": "hello", "rank": 1, "world": 2}]
    assert "--worker_num=2" in result.command_line()
    assert_nothing_left(result)


@pytest.mark.slow
def test_crashing_worker_raises_with_its_traceback(fake, tmp_path):
    with pytest.raises(MsrunError, match="a worker failed") as info:
        run_msrun(["python", str(fake), "fail"], 2, log_dir=tmp_path / "logs", timeout=120)
    assert "rank 1 broke on purpose" in str(info.value)      # the cause is quoted
    assert info.value.result.returncode not in (0, None)
    assert_nothing_left(info.value.result)                    # rank 0 (sleeping) was killed


@pytest.mark.slow
def test_hang_is_killed_at_the_time_limit(fake, tmp_path):
    with pytest.raises(MsrunError, match="did not finish within 20 s") as info:
        run_msrun(["python", str(fake), "hang"], 2, log_dir=tmp_path / "logs", timeout=20)
    result = info.value.result
    assert result.timed_out and result.returncode is None
    # msrun, the scheduler and both workers (in their own sessions) were alive, then killed
    assert result.killed >= 4
    assert_nothing_left(result)
    assert sorted(r["rank"] for r in result.records(kind="hello")) == [0, 1]
