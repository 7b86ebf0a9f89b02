"""Measure the course on several MindSpore releases, each in its own scratch venv.

    python benchmarks/mindspore_versions.py setup 2.10.0 2.8.0 ...   # venv + course lock
    python benchmarks/mindspore_versions.py probe [VERSION...]       # import, jit, actor cliff
    python benchmarks/mindspore_versions.py tests 2.10.0 ...          # unit tests w/o mindnlp
    python benchmarks/mindspore_versions.py bench 2.10.0 ...          # generate + decode profile
    python benchmarks/mindspore_versions.py summary                   # rewrite summary.md

Every venv lives in ``--root``/<version> (default /work/scratch/ms-versions). It gets the
course's requirements.txt with ``mindspore==<version>`` and WITHOUT mindnlp (mindnlp 0.5.1
caps mindspore<=2.7.0), then the course package itself with ``--no-deps -e``. Each step
writes ``<root>/<version>/<step>.json`` (and the raw output next to it); ``summary`` turns
those files into ``<root>/summary.md``. CPU-heavy steps run under ``nice -n 15`` because
the machine is shared; the load average is recorded around every measurement.
To measure the course's own stack alongside, link it in as a version before probe/bench:
``ln -s $PWD/.venv <root>/2.7.0/venv``.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VERSIONS = ["2.10.0", "2.9.0", "2.8.0", "2.7.2"]
NICE = ["nice", "-n", "15"]
# Unit tests that need mindnlp (chapter 11) and cannot run without it.
MINDNLP_TESTS = ["tests/test_interop.py", "tests/test_check_ch11.py"]
TEST_ENV = {"COURSE_HEADLESS": "1", "GLOG_v": "3", "HF_HUB_OFFLINE": "1",
            "PYTHONHASHSEED": "0", "COURSE_SCALE": "ci"}


def venv_python(root: Path, version: str) -> Path:
    return root / version / "venv" / "bin" / "python"


def loadavg() -> list:
    return [round(x, 2) for x in os.getloadavg()]


def save(root: Path, version: str, step: str, result: dict) -> None:
    out = root / version / (step + ".json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1, ensure_ascii=False))


def read(root: Path, version: str, step: str) -> dict:
    path = root / version / (step + ".json")
    return json.loads(path.read_text()) if path.exists() else {}


def run(cmd, log: Path, env=None, timeout=None) -> tuple:
    """Run ``cmd``, output to ``log``; returns (exit code, seconds)."""
    start = time.time()
    with open(log, "w") as f:
        try:
            rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=timeout, cwd=REPO,
                                env=None if env is None else {**os.environ, **env}).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
    return rc, round(time.time() - start, 1)


# ---------------------------------------------------------------- setup

def version_requirements(version: str) -> str:
    """The course lock with mindspore replaced by ``version`` and mindnlp dropped."""
    lines = []
    for line in (REPO / "requirements.txt").read_text().splitlines():
        name = re.split(r"[=<>~!\s]", line.strip(), maxsplit=1)[0].lower()
        if name == "mindnlp":
            continue
        lines.append("mindspore==" + version if name == "mindspore" else line)
    return "\n".join(lines) + "\n"


def setup(root: Path, version: str) -> dict:
    home = root / version
    home.mkdir(parents=True, exist_ok=True)
    req = home / "requirements.txt"
    req.write_text(version_requirements(version))
    py = venv_python(root, version)
    result = {"version": version, "disk_before": disk_free(root)}
    if not py.exists():
        subprocess.run(["python3.11", "-m", "venv", str(home / "venv")], check=True)
    pip = [str(py), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    result["requirements"] = run(pip + ["-r", str(req)], home / "pip-install.log")
    result["course"] = run(pip + ["--no-deps", "-e", str(REPO)], home / "pip-course.log")
    check = subprocess.run([str(py), "-m", "pip", "check"], capture_output=True, text=True)
    result["pip_check"] = (check.stdout + check.stderr).strip()
    result["installed"] = installed_version(py)
    result["disk_after"] = disk_free(root)
    return result


def disk_free(path: Path) -> str:
    st = os.statvfs(path)
    return "%.1f GB" % (st.f_bavail * st.f_frsize / 1e9)


def installed_version(py: Path) -> str:
    out = subprocess.run([str(py), "-c", "import importlib.metadata as m;"
                          "print(m.version('mindspore'))"], capture_output=True, text=True)
    return out.stdout.strip() or "not installed: " + out.stderr.strip()[-200:]



# ---------------------------------------------------------------- probe (runs inside a venv)

CHAIN_LENGTHS = [50, 90, 98, 99, 100, 101, 102, 110, 150, 217]
CHAIN_CALLS = 70          # the scheduler tries single-thread only after ~50 executions


def probe_basics() -> dict:
    """Import, launch_blocking, and one small GRAPH-mode jit; inside the venv."""
    import numpy as np
    import mindspore as ms
    result = {"mindspore": ms.__version__}
    try:
        ms.runtime.launch_blocking()
        result["launch_blocking"] = "ok"
    except Exception as exc:                            # noqa: BLE001 - reported, not hidden
        result["launch_blocking"] = "%s: %s" % (type(exc).__name__, exc)
    try:
        def small(x, y):
            return ms.ops.matmul(x, y).sum(-1) * 2.0
        fn = ms.jit(small)
        x = np.arange(12, dtype=np.float32).reshape(3, 4)
        got = fn(ms.Tensor(x), ms.Tensor(x.T)).asnumpy()
        ok = np.allclose(got, (x @ x.T).sum(-1) * 2.0)
        result["graph_jit"] = "ok" if ok else "wrong result %s" % got
    except Exception as exc:                            # noqa: BLE001
        result["graph_jit"] = "%s: %s" % (type(exc).__name__, str(exc)[:300])
    return result


def chain_function(n: int):
    import mindspore as ms

    def chain(x):
        for _ in range(n):                              # unrolled at compile time: n Mul kernels
            x = x * 1.0001
        return x
    chain.__name__ = "chain_%d" % n
    return ms.jit(chain)


def time_chain(n: int, log: Path) -> dict:
    """Call a jitted chain of n Muls CHAIN_CALLS times with MindSpore's stderr in ``log``;
    the runtime logs 'multi thread or not: 0|1' per execution at GLOG_v=1 (INFO)."""
    import numpy as np
    import mindspore as ms
    fn, x = chain_function(n), ms.Tensor(np.ones(256, np.float32))
    saved = os.dup(2)
    with open(log, "w") as f:
        os.dup2(f.fileno(), 2)
        try:
            times = []
            for _ in range(CHAIN_CALLS):
                t = time.perf_counter()
                fn(x).asnumpy()
                times.append(time.perf_counter() - t)
        finally:
            os.dup2(saved, 2)
            os.close(saved)
    text = log.read_text(errors="replace")
    flags = re.findall(r"multi thread or not: (\d)", text)
    source = re.search(r"\[([\w/.]+:\d+)\] \w+\] [^\n]*multi thread or not", text)
    return {"n": n, "us_per_call_last10": round(1e6 * float(np.median(times[-10:])), 1),
            "us_per_call_best": round(1e6 * min(times[-20:]), 1),     # robust to a busy machine
            "multi_thread_flags_seen": "".join(sorted(set(flags))) or "no log line",
            "last_flag": flags[-1] if flags else None,
            "logged_at": source.group(1) if source else None, "threads": len(os.listdir("/proc/self/task"))}


def cmd_probe_worker(root: Path, versions: list) -> None:
    """(internal) run the probe in this interpreter; prints one JSON line."""
    out = root / versions[0]
    result = probe_basics()
    glog = os.environ.get("GLOG_v", "2")
    result["chains"] = [time_chain(n, out / ("chain_%d.glog%s.log" % (n, glog)))
                        for n in CHAIN_LENGTHS]
    print("PROBE " + json.dumps(result))


def probe_run(root: Path, version: str, glog: str) -> dict:
    """One probe-worker process in the version's venv at GLOG_v=``glog``."""
    env = dict(os.environ, GLOG_v=glog, PYTHONHASHSEED="0")
    proc = subprocess.run(NICE + [str(venv_python(root, version)), __file__, "--root", str(root),
                                  "probe-worker", version], capture_output=True, text=True, env=env)
    lines = [l for l in proc.stdout.splitlines() if l.startswith("PROBE ")]
    return json.loads(lines[-1][6:]) if lines else {"error": proc.stderr[-2000:]}


def cmd_probe(root: Path, versions: list) -> None:
    """Import, launch_blocking, GRAPH jit and the single-thread actor cliff in each venv."""
    for version in versions:
        if not venv_python(root, version).exists():
            print(version, "no venv; run setup first")
            continue
        before = loadavg()
        result = probe_run(root, version, "1")           # INFO log: the scheduler's choice
        quiet = probe_run(root, version, "3")            # no logging: the times
        for chain, timed in zip(result.get("chains", []), quiet.get("chains", [])):
            chain["us_per_call_last10"] = timed["us_per_call_last10"]
            chain["us_per_call_best"] = timed.get("us_per_call_best")
        result["load_before"], result["load_after"] = before, loadavg()
        save(root, version, "probe", result)
        print(version, json.dumps(result), flush=True)
        write_summary(root)



# ---------------------------------------------------------------- tests

DESELECT = ["tests/test_migration_demo.py::test_mindtorch_in_own_process"]   # runs mindtorch


def pytest_command(root: Path, version: str) -> list:
    cmd = NICE + [str(venv_python(root, version)), "-m", "pytest", "tests", "-q", "-rfE",
                  "--junitxml", str(root / version / "junit.xml")]
    cmd += ["--ignore=" + t for t in MINDNLP_TESTS]
    return cmd + ["--deselect=" + t for t in DESELECT]


def junit_results(path: Path) -> dict:
    """Counts and, per failing test, a one-line reason from pytest's JUnit XML."""
    import xml.etree.ElementTree as ET
    counts, failures = {"passed": 0, "failed": 0, "error": 0, "skipped": 0}, {}
    for case in ET.parse(path).getroot().iter("testcase"):
        name = "%s::%s" % (case.get("classname", "").split(".")[-1], case.get("name"))
        bad = case.find("failure") if case.find("failure") is not None else case.find("error")
        if bad is not None:
            counts["failed" if bad.tag == "failure" else "error"] += 1
            failures[name] = short_reason(bad.get("message") or bad.text or "")
        elif case.find("skipped") is not None:
            counts["skipped"] += 1
        else:
            counts["passed"] += 1
    return {"counts": counts, "failures": failures}


def short_reason(message: str) -> str:
    line = next((l.strip() for l in message.splitlines() if l.strip()), "?")
    return re.sub(r"0x[0-9a-f]+", "0x..", line)[:160]


def group_reasons(failures: dict) -> list:
    """[(reason, count, example tests)], most frequent first."""
    groups = {}
    for test, reason in failures.items():
        groups.setdefault(reason, []).append(test)
    return sorted(((r, len(t), t[:3]) for r, t in groups.items()), key=lambda g: -g[1])


def cmd_tests(root: Path, versions: list) -> None:
    """Run the unit tests without the mindnlp ones in each venv (nice'd, CI scale)."""
    for version in versions:
        if not venv_python(root, version).exists():
            print(version, "no venv; run setup first")
            continue
        before, log = loadavg(), root / version / "pytest.log"
        rc, seconds = run(pytest_command(root, version), log, env=TEST_ENV, timeout=3600)
        result = {"rc": rc, "seconds": seconds, "load_before": before, "load_after": loadavg()}
        junit = root / version / "junit.xml"
        if junit.exists():
            result.update(junit_results(junit))
            result["groups"] = group_reasons(result["failures"])
        result["tail"] = log.read_text(errors="replace").splitlines()[-1:]
        save(root, version, "tests", result)
        print(version, json.dumps({k: result.get(k) for k in ("rc", "seconds", "counts")}))
        write_summary(root)



# ---------------------------------------------------------------- bench

GENERATE_LINE = re.compile(r"batch (\d+),\s+(\d+) new tokens: MindSpore\s+([\d.]+) tok/s \(first "
                           r"call ([\d.]+) s\) \| PyTorch\s+([\d.]+) tok/s.*same tokens (\w+).*x([\d.]+)")
PROFILE_LINE = re.compile(r"^(PyTorch|MindSpore)[^:]*: per token wall ([\d.]+) ms \| operators "
                          r"([\d.]+) ms in (\d+) calls \| between operators ([\d.]+) ms", re.M)
BENCHES = {"generate": ["benchmarks/bench_generate_vs_torch.py"],
           "profile_b1": ["benchmarks/profile_decode.py", "--batch", "1"],
           "profile_b8": ["benchmarks/profile_decode.py", "--batch", "8"],
           "baichuan": ["benchmarks/bench_baichuan_vs_torch.py"]}


def parse_bench(name: str, text: str) -> dict:
    if name == "generate":
        return {"cases": [{"batch": int(b), "new": int(n), "ms_tok_s": float(m), "first_s": float(f),
                           "pt_tok_s": float(p), "same": same == "True", "ratio": float(r)}
                          for b, n, m, f, p, same, r in GENERATE_LINE.findall(text)]}
    if name.startswith("profile"):
        return {fw: {"wall_ms": float(w), "kernel_ms": float(k), "calls": int(c),
                     "between_ms": float(b)} for fw, w, k, c, b in PROFILE_LINE.findall(text)}
    return {"lines": [l for l in text.splitlines() if "ratio" in l or "tok/s" in l][-6:]}


def cmd_bench(root: Path, versions: list) -> None:
    """Generation vs transformers and the decode profile in each venv (nice'd, load noted).
    Set MS_VERSIONS_BENCHES=generate,profile_b1,profile_b8,baichuan to choose."""
    chosen = os.environ.get("MS_VERSIONS_BENCHES", "generate,profile_b1,profile_b8").split(",")
    for version in versions:
        result = read(root, version, "bench")
        for name in chosen:
            before, log = loadavg(), root / version / ("bench-%s.log" % name)
            cmd = NICE + [str(venv_python(root, version))] + BENCHES[name]
            rc, seconds = run(cmd, log, env={"GLOG_v": "3", "PYTHONPATH": str(REPO)},
                              timeout=1800)
            result[name] = {"rc": rc, "seconds": seconds, "load_before": before,
                            "load_after": loadavg(),
                            **parse_bench(name, log.read_text(errors="replace"))}
            save(root, version, "bench", result)
            print(version, name, json.dumps(result[name]), flush=True)
            write_summary(root)



# ---------------------------------------------------------------- summary.md

HEADER = ("| version | installs | pip check | tests pass/fail | top failure reasons | actor threshold "
          "| generate ratios b1/b8 (64, 256 new) | time between kernels (MS vs torch, ms/token) |")


def loaded(*loads) -> str:
    worst = max((l[0] for l in loads if l), default=0.0)
    return " **loaded** (load %.1f)" % worst if worst > 1.0 else " (load %.1f)" % worst


def cell_setup(r: dict) -> tuple:
    if not r:
        return "not set up", ""
    ok = r["requirements"][0] == 0 and r["course"][0] == 0
    check = r["pip_check"].replace("|", "/").replace("\n", "; ")
    return ("yes (%.0f s)" % r["requirements"][1] if ok else "FAILED, see pip-install.log"), check


def cell_tests(r: dict) -> tuple:
    if not r.get("counts"):
        return ("not run" if not r else "rc %s, no report" % r.get("rc")), ""
    c = r["counts"]
    text = "%d / %d (%d err, %d skip; %.0f min)%s" % (
        c["passed"], c["failed"] + c["error"], c["error"], c["skipped"], r["seconds"] / 60,
        loaded(r["load_before"], r["load_after"]))
    reasons = "; ".join("%dx %s" % (n, reason[:90]) for reason, n, _ in r["groups"][:3])
    return text, reasons.replace("|", "/")


def cell_threshold(r: dict) -> str:
    chains = r.get("chains") or []
    single = [c["n"] for c in chains if c.get("last_flag") == "0"]
    multi = [c["n"] for c in chains if c.get("last_flag") == "1"]
    if not chains:
        return "not probed" if not r else "probe failed"
    if not single and not multi:
        return "no log line; us/call " + ", ".join(
            "%d: %.0f" % (c["n"], c["us_per_call_last10"]) for c in chains)
    times = {c["n"]: c.get("us_per_call_best") or c["us_per_call_last10"] for c in chains}
    source = next((c["logged_at"] for c in chains if c.get("logged_at")), None)
    return "single-thread up to %s, multi from %s (best us/call at 100: %s, 101: %s; log: %s)" % (
        max(single, default="-"), min(multi, default="-"), times.get(100), times.get(101),
        source)


def cell_bench(r: dict) -> tuple:
    gen = r.get("generate", {})
    cases = {(c["batch"], c["new"]): c["ratio"] for c in gen.get("cases", [])}
    ratios = ("b1 x%s/x%s, b8 x%s/x%s" % tuple(cases.get(k, "?") for k in
                                                [(1, 64), (1, 256), (8, 64), (8, 256)])
              + loaded(gen["load_before"], gen["load_after"])) if cases else "not run"
    between = []
    for b in ("b1", "b8"):
        prof = r.get("profile_" + b, {})
        if "MindSpore" in prof and "PyTorch" in prof:
            between.append("%s %.2f vs %.2f%s" % (b, prof["MindSpore"]["between_ms"],
                           prof["PyTorch"]["between_ms"],
                           loaded(prof["load_before"], prof["load_after"])))
    return ratios, "; ".join(between) or "not run"


def summary_row(root: Path, version: str) -> str:
    installs, check = cell_setup(read(root, version, "setup"))
    tests, reasons = cell_tests(read(root, version, "tests"))
    probe = read(root, version, "probe")
    ratios, between = cell_bench(read(root, version, "bench"))
    name = version + ("" if probe.get("mindspore") in (None, version)
                      else " (imports %s)" % probe["mindspore"])
    return "| %s |" % " | ".join([name, installs, check, tests, reasons,
                                   cell_threshold(probe), ratios, between])


def write_summary(root: Path, versions=None) -> None:
    """Rewrite <root>/summary.md from the JSON files of every version measured so far."""
    found = sorted((p.name for p in root.iterdir() if (p / "setup.json").exists()
                    or (p / "probe.json").exists()), key=lambda v: [int(x) for x in v.split(".")])
    lines = ["# MindSpore versions, written by benchmarks/mindspore_versions.py", "",
             "Updated %s UTC. 'loaded' = load average > 1.0 on the 2-core machine at the start or "
             "end of that measurement." % time.strftime("%Y-%m-%d %H:%M", time.gmtime()), "",
             HEADER, "|" + "---|" * 8]
    lines += [summary_row(root, v) for v in found]
    (root / "summary.md").write_text("\n".join(lines) + "\n")


# ---------------------------------------------------------------- command line

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, default=Path("/work/scratch/ms-versions"))
    sub = ap.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        p = sub.add_parser(name, help=COMMANDS[name].__doc__.splitlines()[0])
        p.add_argument("versions", nargs="*", default=VERSIONS)
    args = ap.parse_args(argv)
    args.root.mkdir(parents=True, exist_ok=True)
    COMMANDS[args.command](args.root, args.versions)


def cmd_setup(root: Path, versions: list) -> None:
    """Create each venv and install the course lock with that MindSpore (one at a time)."""
    for version in versions:
        print(version, "setup ...", flush=True)
        result = setup(root, version)
        save(root, version, "setup", result)
        print(version, json.dumps(result, ensure_ascii=False), flush=True)
        write_summary(root)




COMMANDS = {"setup": cmd_setup, "probe": cmd_probe, "probe-worker": cmd_probe_worker,
            "tests": cmd_tests, "bench": cmd_bench, "summary": write_summary}

if __name__ == "__main__":
    main()
