"""Install the course into a ModelArts preset MindSpore image without touching its MindSpore.

    python tools/modelarts.py install   # what `make modelarts` runs, with the image's python
    python tools/modelarts.py check     # only the guard: what pip would change, nothing installed
    python tools/modelarts.py resolve   # resolve the profile for Linux aarch64 / CPython 3.11

`install` (1) finds the image's MindSpore, (2) asks pip for a dry-run report of
requirements-modelarts.txt and refuses if pip would install or change any mindspore*
distribution, or break a requirement that holds today (e.g. the image's own packages),
(3) installs the profile with --no-deps (it is a complete lock) and the course package,
(4) audits every requirement afterwards: the only ones allowed to stay unmet are mindnlp's
``mindspore<=2.7.0`` cap and ``torch`` (optional here), each named with the reason,
(5) checks MindSpore is the same distribution (version, location, RECORD hash), (6) registers
the Jupyter kernel for this python (the image's conda environment), (7) runs ``cl.setup()``.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.specifiers import SpecifierSet
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
PROFILE = ROOT / "requirements-modelarts.txt"
KERNEL = "mindspore-course"
PROTECTED = re.compile(r"^mindspore($|-)")   # mindspore, mindspore-ascend, mindspore-lite, ...
MINDSPORE = SpecifierSet(">=2.7.0,<2.8")    # what course_lib accepts (pyproject.toml)
# Requirements that may stay unmet after the install, and why (printed, never silent).
ALLOWED_UNMET = {
    ("mindnlp", "mindspore"): "mindnlp 0.5.1 caps mindspore<=2.7.0; chapter 11 as of 2026-12-02 ran "
                              "on MindSpore 2.7.1 with one check failing (docs/instructors.md)",
    (None, "torch"): "torch is optional on ModelArts: only the independent reference of the "
                     "tests and of chapters 05, 06 and 13 (see docs/instructors.md)",
}
# Linux aarch64 glibc 2.17 .. 2.28 (pip does not widen a --platform to older glibc itself).
AARCH64 = [f"manylinux_2_{v}_aarch64" for v in range(28, 16, -1)] + ["manylinux2014_aarch64"]
GLIBC_MIN = "2.28"   # the profile's aarch64 wheels need it (pyarrow, hf-xet: manylinux_2_28)


def read_pins(path: Path = PROFILE) -> dict[str, str]:
    """``{canonical name: version}`` of a ``name==version`` requirements file."""
    pins = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, version = line.partition("==")
            if not version:
                raise ValueError(f"{path.name}: {line!r} is not pinned as name==version")
            pins[canonicalize_name(name)] = version.strip()
    return pins


def installed() -> dict[str, metadata.Distribution]:
    return {canonicalize_name(d.metadata["Name"]): d for d in metadata.distributions()}


def fingerprint(dist: metadata.Distribution) -> str:
    """Version + location + hash of its RECORD: changes if pip touches the distribution."""
    record = dist.read_text("RECORD") or ""
    return f"{dist.version} @ {dist.locate_file('')} #{hashlib.sha256(record.encode()).hexdigest()[:12]}"


def unmet(versions: dict[str, str], requires: dict[str, list[str]],
          env: dict | None = None) -> set[tuple[str, str, str]]:
    """Requirements (owner, requirement, found) not satisfied by ``versions``; markers are
    evaluated for this interpreter, or for ``env`` (another platform's marker values)."""
    bad = set()
    for owner, reqs in requires.items():
        for text in reqs:
            req = Requirement(text)
            if req.marker is not None and not req.marker.evaluate({**(env or {}), "extra": ""}):
                continue
            have = versions.get(canonicalize_name(req.name))
            if have is None or not req.specifier.contains(Version(have), prereleases=True):
                bad.add((owner, str(req), have or "not installed"))
    return bad


def allowed(problem: tuple[str, str, str]) -> str | None:
    owner, req, _ = problem
    name = canonicalize_name(Requirement(req).name)
    return ALLOWED_UNMET.get((owner, name)) or ALLOWED_UNMET.get((None, name))


def pip_report(args: list[str]) -> dict:
    """``pip install --dry-run --report`` of ``args``; nothing is installed."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--quiet",
               "--disable-pip-version-check", "--report", str(report), *args]
        run = subprocess.run(cmd, capture_output=True, text=True)
        if run.returncode != 0:
            raise SystemExit(f"pip could not resolve {args[-1]}:\n{run.stderr.strip()}")
        return json.loads(report.read_text())


def environment() -> tuple[dict[str, str], dict[str, list[str]]]:
    """Installed versions and requirements of this python's environment."""
    dists = installed()
    return ({n: d.version for n, d in dists.items()},
            {n: list(d.requires or []) for n, d in dists.items()})


def plan(report: dict) -> dict[str, tuple[str, list[str]]]:
    """``{name: (version, requires_dist)}`` that pip would install."""
    out = {}
    for item in report["install"]:
        meta = item["metadata"]
        out[canonicalize_name(meta["name"])] = (meta["version"], meta.get("requires_dist") or [])
    return out


def guard(report: dict) -> list[str]:
    """Why pip's plan must not run: MindSpore would change, or a requirement would break."""
    versions, requires = environment()
    todo = plan(report)
    errors = [f"pip would install {name}=={version} over "
              f"{versions.get(name, 'nothing')}: the image's MindSpore must stay untouched"
              for name, (version, _) in todo.items() if PROTECTED.match(name)]
    after_v = {**versions, **{n: v for n, (v, _) in todo.items()}}
    after_r = {**requires, **{n: r for n, (_, r) in todo.items()}}
    before = unmet(versions, requires)
    for owner, req, found in sorted(unmet(after_v, after_r) - before):
        if allowed((owner, req, found)) is None:
            errors.append(f"{owner} needs {req} but would get {found}")
    return errors


def show_plan(report: dict) -> None:
    versions, _ = environment()
    todo = plan(report)
    changed = [f"{n} {versions[n]} -> {v}" for n, (v, _) in sorted(todo.items())
               if n in versions and versions[n] != v]
    new = sum(n not in versions for n in todo)
    print(f"pip plan: {new} new packages, {len(changed)} changed versions"
          + ("".join(f"\n    {c}" for c in changed)))


def find_mindspore() -> metadata.Distribution:
    dists = [d for n, d in installed().items() if PROTECTED.match(n) and n != "mindspore-lite"]
    if not dists:
        raise SystemExit(
            f"No MindSpore in {sys.executable}. `make modelarts` is for an image that already "
            "has MindSpore (ModelArts: open a terminal and `conda activate` the image's MindSpore "
            "environment, or pass MODELARTS_PYTHON=/path/to/its/python). Elsewhere use `make lab`.")
    return dists[0]


def audit(before: set) -> int:
    """After installing: each unmet requirement is explained, pre-existing, or an error."""
    errors = 0
    for problem in sorted(unmet(*environment())):
        owner, req, found = problem
        reason = allowed(problem) or ("already unmet before this install" if problem in before
                                      else None)
        print(f"  {'note' if reason else 'ERROR'}: {owner} requires {req}, has {found}"
              + (f" -- {reason}" if reason else ""))
        errors += reason is None
    return errors


def pip(*args: str) -> None:
    cmd = [sys.executable, "-m", "pip", "install", "--disable-pip-version-check", *args]
    print("+", " ".join(cmd[2:]), flush=True)
    subprocess.run(cmd, check=True)


def ascend_env(environ=os.environ) -> dict[str, str]:
    """CANN's variables as the instructor's shell has them (set_env.sh), for the kernel: a
    kernel started by JupyterLab does not read the shell profile. Empty off Ascend."""
    if not any(k.startswith("ASCEND_") for k in environ):
        return {}
    keep = ("LD_LIBRARY_PATH", "PYTHONPATH", "PATH", "TOOLCHAIN_HOME")
    return {k: v for k, v in environ.items() if k.startswith("ASCEND_") or k in keep}


def register_kernel(prefix: str | None = None) -> None:
    """The kernel runs this python (the image's conda environment). ``--user`` by default, so
    the JupyterLab of ModelArts (another environment) lists it; ``prefix`` for a scratch test."""
    env = os.environ.get("CONDA_DEFAULT_ENV") or Path(sys.prefix).name
    where = ["--prefix", prefix] if prefix else ["--user"]
    extra = [a for k, v in sorted(ascend_env().items()) for a in ("--env", k, v)]
    subprocess.run([sys.executable, "-m", "ipykernel", "install", *where, "--name", KERNEL,
                    "--display-name", f"MindSpore 课程 ({env}, Python 3.11)", *extra], check=True)


def check() -> dict:
    """Steps 1-2: find MindSpore, dry-run the profile, refuse if the plan is unsafe."""
    ms = find_mindspore()
    print(f"MindSpore in this environment: {ms.metadata['Name']} {fingerprint(ms)}")
    if Version(ms.version) not in MINDSPORE:
        raise SystemExit(f"MindSpore {ms.version}: the course needs {MINDSPORE} (measured on "
                         "2.7.0 and 2.7.1). Pick the mindspore_2.7.1 preset image.")
    libc, libc_version = platform.libc_ver()
    if platform.machine() == "aarch64" and libc == "glibc" and \
            Version(libc_version) < Version(GLIBC_MIN):
        raise SystemExit(f"glibc {libc_version}: the course's aarch64 wheels need glibc >= "
                         f"{GLIBC_MIN}. Pick the mindspore_2.7.1 preset image (hce_2.0).")
    if sys.version_info[:2] != (3, 11):
        raise SystemExit(f"Python {sys.version.split()[0]}: the course needs Python 3.11.")
    report = pip_report(["--no-deps", "-r", str(PROFILE)])
    show_plan(report)
    errors = guard(report)
    if errors:
        raise SystemExit("Refusing to install, nothing was changed:\n  " + "\n  ".join(errors))
    print("Guard passed: pip would not change MindSpore nor break a requirement that holds now.")
    return report


def install(kernel_prefix: str | None = None) -> None:
    ms = find_mindspore()
    before_fp, before = fingerprint(ms), unmet(*environment())
    check()
    pip("--no-deps", "-r", str(PROFILE))
    pip("--no-deps", "--no-build-isolation", "-e", str(ROOT))
    after = installed().get(canonicalize_name(ms.metadata["Name"]))
    if after is None or fingerprint(after) != before_fp:
        raise SystemExit(f"MindSpore changed during the install: {before_fp} -> "
                         f"{fingerprint(after) if after else 'removed'}. Please report this.")
    print(f"MindSpore untouched: {before_fp}\nRequirement audit:")
    if audit(before):
        raise SystemExit("Unexplained unmet requirements above: the install is incomplete.")
    register_kernel(kernel_prefix)
    # The first thing every chapter runs; on Ascend its line shows card, jit_level and memory.
    subprocess.run([sys.executable, "-c", "import course_lib as cl; cl.setup()"], check=True,
                   cwd=ROOT, env={**os.environ, "GLOG_v": "3"})
    print(f"Done. In JupyterLab pick the kernel 'MindSpore 课程' ({KERNEL}); "
          "`make modelarts-course` runs every chapter to pre-check the class.")


def resolve(platforms=AARCH64, python="3.11", profile=PROFILE, extra=()) -> dict:
    """Resolve ``profile`` (+ ``extra`` specs) for another platform, binary wheels only."""
    specs = [f"{n}=={v}" for n, v in read_pins(profile).items() if n != "snownlp"]
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write("\n".join([*specs, *extra]) + "\n")
    try:
        return pip_report(["--isolated", "--index-url", "https://pypi.org/simple",
                           *(["--cert", os.environ["PIP_CERT"]] if "PIP_CERT" in os.environ else []),
                           "--ignore-installed", "--no-deps", "--only-binary=:all:",
                           "--target", os.path.join(tempfile.gettempdir(), "never-written"),
                           *[a for p in platforms for a in ("--platform", p)],
                           "--python-version", python, "--implementation", "cp", "-r", f.name])
    finally:
        os.unlink(f.name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["install", "check", "resolve"])
    parser.add_argument("--kernel-prefix", help="register the kernel under this prefix "
                        "instead of the user's Jupyter directory (tests)")
    args = parser.parse_args()
    cmd = args.command
    if cmd == "install":
        install(args.kernel_prefix)
    elif cmd == "resolve":
        for item in resolve()["install"]:
            print(item["metadata"]["name"], item["metadata"]["version"],
                  item["download_info"]["url"].rsplit("/", 1)[-1])
    else:
        check()


if __name__ == "__main__":
    main()
