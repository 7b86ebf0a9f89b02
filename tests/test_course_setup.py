"""The two commands of README.md: `make lab` and `make test` (this file runs inside the latter)."""
import json
import os
import re
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_readme_gives_exactly_the_two_commands_and_ci_runs_the_test_one():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    commands = set(re.findall(r"^\s*(make \w+)\s*$", readme, flags=re.M))
    assert {"make lab", "make test"} <= commands
    ci = (ROOT / ".ci" / "run").read_text()
    assert [l for l in ci.splitlines() if l.startswith("make")] == ["make test"]


def test_second_make_does_not_reinstall():
    out = subprocess.run(["make", "-n", "venv", "kernel"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "pip install" not in out.stdout and "ipykernel install" not in out.stdout


def test_pins_agree_between_requirements_and_environment_yml():
    env = (ROOT / "environment.yml").read_text()
    assert "python=3.11" in env and "-r requirements.txt" in env
    lock = {l.split("==")[0].lower(): l.split("==")[1]
            for l in (ROOT / "requirements.txt").read_text().splitlines() if "==" in l}
    top = [l.split("#")[0].strip() for l in (ROOT / "requirements.in").read_text().splitlines()]
    for line in filter(None, top):
        name, version = line.split("==")
        key = name.lower().replace("_", "-")
        found = lock.get(key) or lock.get(name.lower().replace("-", "_"))
        assert found == version, f"{name}: requirements.in says {version}, lock says {found}"
    assert lock["numpy"].startswith("1.") and lock["mindspore"] == "2.7.0"


def test_make_lab_passes_allow_root_only_as_root():
    """JupyterLab refuses to start as root (containers) without --allow-root: make adds it."""
    def lab_line(uid):
        out = subprocess.run(["make", "-n", "lab", f"USER_ID={uid}"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout
        return [l for l in out.splitlines() if "jupyter lab" in l][-1]
    assert "--allow-root" in lab_line(0)
    assert "--allow-root" not in lab_line(1000)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_make_lab_serves_the_course_kernel():
    port, token = _free_port(), "course-test-token"
    args = (f"--no-browser --ip=127.0.0.1 --port={port} --ServerApp.port_retries=0 "
            f"--IdentityProvider.token={token}")   # as root, make adds --allow-root
    proc = subprocess.Popen(["make", "lab", f"LAB_ARGS={args}"], cwd=ROOT, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline, specs = time.time() + 90, None
        while time.time() < deadline and specs is None:
            try:
                req = urllib.request.Request(f"http://127.0.0.1:{port}/api/kernelspecs",
                                             headers={"Authorization": f"token {token}"})
                specs = json.load(urllib.request.urlopen(req, timeout=5))
            except OSError:
                assert proc.poll() is None, "make lab exited early"
                time.sleep(1)
        assert specs is not None, "JupyterLab did not answer within 90 s"
        assert "mindspore-course" in specs["kernelspecs"]
        spec = specs["kernelspecs"]["mindspore-course"]["spec"]
        assert spec["language"] == "python" and ".venv" in spec["argv"][0]
        req = urllib.request.Request(f"http://127.0.0.1:{port}/api/contents",
                                     headers={"Authorization": f"token {token}"})
        names = {c["name"] for c in json.load(urllib.request.urlopen(req, timeout=5))["content"]}
        assert "00_setup_and_tour.ipynb" in names  # the lab opens on notebooks/
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
