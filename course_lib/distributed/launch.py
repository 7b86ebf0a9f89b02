"""Run a script on N worker processes with MindSpore's own launcher, ``msrun`` — safely.

``msrun --worker_num=2 --local_worker_num=2 --master_port=P --log_dir=D --join=True python -m X``
starts one *scheduler* process (it builds the cluster: every worker registers with it on
port P) and N *worker* processes that run X. Each worker writes ``D/worker_<rank>.log``.

Three things go wrong in practice, and this module handles each:

* **Port clashes** — a fixed ``--master_port`` is taken by someone else's run:
  ``free_port()`` asks the OS for an unused one.
* **Hangs** — a worker that dies before joining the cluster leaves the others waiting
  (for ``--cluster_time_out``, 600 s by default). ``run_msrun`` bounds the run time.
* **Orphans** — msrun starts every worker in its *own session* (``os.setsid``), so killing
  msrun's process group does not reach them. Every process of a run inherits a unique
  environment variable (``COURSE_MSRUN_ID``); on failure, timeout or exit we find all of
  them under ``/proc`` and kill their process groups.

Workers report facts to the launcher by printing one JSON object per line after
``RECORD_PREFIX`` (``emit(...)``); ``MsrunResult.records()`` parses them from the logs.
"""
from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

RUN_ID_ENV = "COURSE_MSRUN_ID"
RECORD_PREFIX = "@course "
# glog lines from MindSpore's C++ side ("[INFO] PS(123,...)...") — noise when reading logs.
_GLOG_NOISE = ("[INFO] ", "[WARNING] ", "[DEBUG] ")


class MsrunError(RuntimeError):
    """The distributed run failed or timed out; the message quotes the workers' logs."""

    def __init__(self, message: str, result: "MsrunResult"):
        super().__init__(message)
        self.result = result


# --------------------------------------------------------------------------------------
# Building the command
# --------------------------------------------------------------------------------------
def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def msrun_executable() -> list[str]:
    """The ``msrun`` next to the running interpreter (the venv's), else the module form."""
    script = Path(sys.executable).with_name("msrun")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "mindspore.parallel.cluster.run"]


def msrun_command(target: Sequence[str], worker_num: int = 2, local_worker_num: int | None = None,
                  master_port: int = 8118, log_dir: str | os.PathLike = "msrun_log",
                  join: bool = True, cluster_time_out: int | None = None,
                  master_addr: str | None = None, node_rank: int | None = None,
                  msrun: Sequence[str] = ("msrun",)) -> list[str]:
    """The msrun command line as a list (``shlex.join`` it to show or paste it).

    ``target`` is what every worker runs: ``["python", "-m", "pkg.module", "--flag", "1"]``
    or ``["train.py", "--flag", "1"]`` (msrun prefixes a bare script with ``python``).
    For several nodes give ``master_addr`` (the scheduler's IP) and ``node_rank``.
    """
    target = [str(t) for t in target]
    if not target:
        raise ValueError("target is empty: give the script to run, e.g. "
                         "['python', '-m', 'course_lib.distributed.train_dp'].")
    if not isinstance(worker_num, int) or worker_num < 1:
        raise ValueError(f"worker_num must be a positive int, got {worker_num!r}")
    local = worker_num if local_worker_num is None else local_worker_num
    if not 1 <= local <= worker_num:
        raise ValueError(f"local_worker_num={local} must be between 1 and worker_num={worker_num}.")
    if not 1024 <= int(master_port) <= 65535:
        raise ValueError(f"master_port must be in 1024..65535, got {master_port}")
    cmd = list(msrun) + [f"--worker_num={worker_num}", f"--local_worker_num={local}",
                         f"--master_port={int(master_port)}", f"--log_dir={log_dir}",
                         f"--join={join}"]
    if master_addr is not None:
        cmd.append(f"--master_addr={master_addr}")
    if node_rank is not None:
        cmd.append(f"--node_rank={node_rank}")
    if cluster_time_out is not None:
        cmd.append(f"--cluster_time_out={int(cluster_time_out)}")
    return cmd + target


# --------------------------------------------------------------------------------------
# Reading what the workers wrote
# --------------------------------------------------------------------------------------
def emit(**record) -> None:
    """Called inside a worker: print one machine-readable fact for the launcher."""
    print(RECORD_PREFIX + json.dumps(record, ensure_ascii=False, sort_keys=True), flush=True)


def parse_records(text: str) -> list[dict]:
    """Every ``emit``-ed record in a log, in order."""
    out = []
    for line in text.splitlines():
        pos = line.find(RECORD_PREFIX)
        if pos >= 0:
            try:
                out.append(json.loads(line[pos + len(RECORD_PREFIX):]))
            except json.JSONDecodeError:
                pass  # a line cut short by a killed process
    return out


def clean_log(text: str) -> str:
    """A worker log without MindSpore's INFO/WARNING glog lines (kept: prints, errors)."""
    return "\n".join(l for l in text.splitlines() if not l.startswith(_GLOG_NOISE))


def read_worker_logs(log_dir: str | os.PathLike) -> dict[int, str]:
    """``{rank: text}`` from ``worker_<rank>.log`` files (msrun's default names)."""
    logs = {}
    for path in Path(log_dir).glob("worker_*.log"):
        suffix = path.stem.split("_", 1)[1]
        if suffix.isdigit():
            logs[int(suffix)] = path.read_text(errors="replace")
    return dict(sorted(logs.items()))


@dataclass
class MsrunResult:
    command: list[str]
    returncode: int | None          # None when the run was killed at the time limit
    seconds: float
    log_dir: Path
    logs: dict[int, str] = field(default_factory=dict)   # rank -> worker log
    scheduler_log: str = ""
    launcher_output: str = ""       # msrun's own stdout/stderr
    timed_out: bool = False
    killed: int = 0                 # processes of this run still alive at the end (then killed)
    run_id: str = ""                # the COURSE_MSRUN_ID every process of the run carries

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    def records(self, rank: int | None = None, kind: str | None = None) -> list[dict]:
        """Records emitted by one rank (or all ranks, rank-major), optionally of one kind."""
        ranks = self.logs if rank is None else {rank: self.logs.get(rank, "")}
        recs = [r for text in ranks.values() for r in parse_records(text)]
        return [r for r in recs if kind is None or r.get("kind") == kind]

    def log(self, rank: int, clean: bool = True) -> str:
        text = self.logs.get(rank, "")
        return clean_log(text) if clean else text

    def command_line(self) -> str:
        return shlex.join(self.command)


# --------------------------------------------------------------------------------------
# Finding and killing every process of a run
# --------------------------------------------------------------------------------------
def run_processes(run_id: str) -> list[int]:
    """PIDs of live processes that carry ``COURSE_MSRUN_ID=run_id`` (Linux ``/proc``)."""
    needle = f"{RUN_ID_ENV}={run_id}".encode()
    pids = []
    me = os.getpid()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    pids.append(int(entry.name))
        except OSError:   # gone meanwhile, or another user's process
            continue
    return pids


def kill_run(run_id: str) -> int:
    """SIGKILL every process of the run (and its process group); return how many were alive."""
    pids = run_processes(run_id)
    own_group = os.getpgrp()
    for pid in pids:
        try:
            group = os.getpgid(pid)
            if group != own_group:          # never the caller's own group (pytest, kernel)
                os.killpg(group, signal.SIGKILL)
            else:
                os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    # Reaped children disappear from /proc; wait briefly so the next check is clean.
    deadline = time.monotonic() + 5
    while run_processes(run_id) and time.monotonic() < deadline:
        time.sleep(0.1)
    return len(pids)


# --------------------------------------------------------------------------------------
# The launcher
# --------------------------------------------------------------------------------------
def worker_env(extra: dict | None = None, run_id: str | None = None) -> dict:
    """Environment for msrun and its workers: this venv's ``python`` first on PATH (msrun
    starts ``python`` from PATH), the repo importable, MindSpore's C++ logs quiet."""
    env = dict(os.environ)
    bindir = str(Path(sys.executable).parent)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    repo = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = repo + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("GLOG_v", "3")
    env["PYTHONUNBUFFERED"] = "1"
    if run_id:
        env[RUN_ID_ENV] = run_id
    env.update({k: str(v) for k, v in (extra or {}).items()})
    return env


def _failure_message(result: MsrunResult, why: str, tail: int = 25) -> str:
    lines = [f"{why}  Command: {result.command_line()}", f"Logs: {result.log_dir}"]
    for rank, text in result.logs.items():
        body = clean_log(text).splitlines()[-tail:]
        lines.append(f"--- worker {rank} (last {len(body)} lines) ---")
        lines.extend(body)
    if not result.logs:
        lines.append("--- no worker log was written; msrun said: ---")
        lines.extend(clean_log(result.launcher_output).splitlines()[-tail:])
    return "\n".join(lines)


def run_msrun(target: Sequence[str], worker_num: int = 2, *, log_dir: str | os.PathLike | None = None,
              timeout: float = 300, env: dict | None = None, port: int | None = None,
              check: bool = True) -> MsrunResult:
    """Launch ``target`` on ``worker_num`` local workers and wait at most ``timeout`` seconds.

    Returns an ``MsrunResult`` (logs per rank, records, wall time). On a non-zero exit or a
    timeout every process of the run is killed and, with ``check=True``, ``MsrunError`` is
    raised with the tail of each worker's log.
    """
    if timeout <= 0:
        raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
    if log_dir is None:
        from ..runtime import cache_dir
        log_dir = cache_dir("msrun", "run")
    log_dir = Path(log_dir).resolve()
    log_dir.mkdir(parents=True, exist_ok=True)
    for stale in [*log_dir.glob("worker_*.log"), log_dir / "scheduler.log", log_dir / "msrun.out"]:
        stale.unlink(missing_ok=True)     # never parse an older run's logs

    run_id = uuid.uuid4().hex
    port = free_port() if port is None else port
    # The scheduler gives up on missing workers a little before our own deadline.
    cmd = msrun_command(target, worker_num, master_port=port, log_dir=log_dir,
                        cluster_time_out=max(10, int(timeout)), msrun=msrun_executable())
    result = MsrunResult(command=cmd, returncode=None, seconds=0.0, log_dir=log_dir, run_id=run_id)
    out_path = log_dir / "msrun.out"
    start = time.perf_counter()
    with open(out_path, "w") as out:
        # Own session: msrun, its scheduler and `tail` helpers share a process group we can kill.
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=log_dir,
                                env=worker_env(env, run_id), start_new_session=True)
        try:
            result.returncode = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            result.timed_out = True
        except BaseException:              # e.g. KeyboardInterrupt in the notebook
            kill_run(run_id)
            proc.kill()
            proc.wait()
            raise
        finally:
            result.seconds = time.perf_counter() - start
            result.killed = kill_run(run_id)
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    result.logs = read_worker_logs(log_dir)
    sched = log_dir / "scheduler.log"
    result.scheduler_log = sched.read_text(errors="replace") if sched.exists() else ""
    result.launcher_output = out_path.read_text(errors="replace")
    if check and result.timed_out:
        raise MsrunError(_failure_message(
            result, f"msrun did not finish within {timeout:g} s; all processes of the run "
                    f"were killed ({result.killed})."), result)
    if check and result.returncode != 0:
        raise MsrunError(_failure_message(
            result, f"msrun exited with code {result.returncode}: a worker failed."), result)
    return result
