"""The ModelArts install path (requirements-modelarts.txt + tools/modelarts.py, docs/instructors.md).

Offline tests check the profile against the lock and the guard/audit logic on synthetic pip
plans. The `network` test resolves the profile for Linux aarch64 / CPython 3.11 against PyPI
(nothing installed; measured 43 s on a quiet machine, 127 s at load average 15 on 2 cores) and
is skipped when PyPI cannot be reached.
"""
import importlib.util
import os
import re
import subprocess
import sys
import urllib.request
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("modelarts", ROOT / "tools" / "modelarts.py")
modelarts = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(modelarts)

LOCK = modelarts.read_pins(ROOT / "requirements.txt")
PROFILE = modelarts.read_pins(modelarts.PROFILE)
# Where the profile may differ from the lock, each with the reason written in the profile.
LEFT_OUT = {"mindspore", "torch"}
REPINNED = {"soupsieve"}      # 4.1.3 needs Python >= 3.11.5; the image's 3.11.x is unknown
# `pip freeze` leaves these out of a lock; every environment that has pip has them (astunparse,
# a MindSpore dependency, requires wheel).
FREEZE_OMITS = {"pip", "setuptools", "wheel"}
# Marker values of the ModelArts images: Linux aarch64, CPython 3.11 (micro unknown: .0 is
# the strictest choice for Requires-Python).
AARCH64_ENV = {"python_version": "3.11", "python_full_version": "3.11.0", "os_name": "posix",
               "sys_platform": "linux", "platform_system": "Linux", "platform_machine": "aarch64",
               "implementation_name": "cpython", "platform_python_implementation": "CPython"}


def test_profile_never_lists_mindspore_nor_torch():
    text = modelarts.PROFILE.read_text(encoding="utf-8")
    names = [l.split("==")[0].strip().lower() for l in text.splitlines()
             if l.strip() and not l.startswith("#")]
    assert names and not [n for n in names if n.startswith("mindspore") or n == "torch"]
    assert all(modelarts.PROTECTED.match(n) is None for n in PROFILE)


def test_profile_is_the_lock_minus_mindspore_and_torch():
    assert set(LOCK) - set(PROFILE) == LEFT_OUT
    assert set(PROFILE) - set(LOCK) == set()
    differ = {n for n in PROFILE if PROFILE[n] != LOCK[n]}
    assert differ == REPINNED, f"pins differ from requirements.txt without a reason: {differ}"
    text = modelarts.PROFILE.read_text(encoding="utf-8")
    assert all(re.search(rf"^# {n}: ", text, flags=re.M) for n in REPINNED)


def _plan(**pins):
    """A pip --report with the given name=version installs and their real requirements."""
    installs = []
    for name, version in pins.items():
        requires = metadata.requires(name) if name in ("mindnlp", "numpy") else []
        installs.append({"metadata": {"name": name, "version": version,
                                      "requires_dist": requires or []}})
    return {"install": installs}


def test_guard_refuses_a_plan_that_replaces_mindspore():
    errors = modelarts.guard(_plan(mindspore="2.6.0"))
    assert "mindspore==2.6.0" in errors[0] and "must stay untouched" in errors[0], errors


def test_guard_refuses_a_plan_that_breaks_the_images_requirements():
    # The installed MindSpore requires numpy<2: a plan bringing numpy 2 must be refused.
    errors = modelarts.guard(_plan(numpy="2.1.0"))
    assert any(e.startswith("mindspore needs numpy") and "2.1.0" in e for e in errors), errors


def test_guard_accepts_the_profile_itself():
    installs = {"install": [{"metadata": {"name": n, "version": v, "requires_dist": []}}
                            for n, v in PROFILE.items()]}
    assert modelarts.guard(installs) == []


def test_audit_allows_only_the_named_exceptions():
    versions = {"mindnlp": "0.5.1", "mindspore": "2.7.1", "accelerate": "1.10.1",
                "numpy": "1.26.4"}
    requires = {"mindnlp": ["mindspore<=2.7.0,>=2.5.0"], "accelerate": ["torch>=2.0.0"],
                "mindspore": ["numpy<2.0.0,>=1.20.0", "pillow>=6.2.0"]}
    problems = modelarts.unmet(versions, requires)
    explained = {p[:2]: modelarts.allowed(p) for p in problems}
    assert set(explained) == {("mindnlp", "mindspore<=2.7.0,>=2.5.0"),
                              ("accelerate", "torch>=2.0.0"), ("mindspore", "pillow>=6.2.0")}
    assert explained[("mindspore", "pillow>=6.2.0")] is None   # anything else is an error
    assert "2.7.1" in explained[("mindnlp", "mindspore<=2.7.0,>=2.5.0")]
    assert "optional" in explained[("accelerate", "torch>=2.0.0")]


def test_snownlp_is_pure_python_without_requirements():
    """snownlp ships only an sdist; it installs on aarch64 because it builds a pure wheel."""
    dist = metadata.distribution("snownlp")
    assert dist.version == PROFILE["snownlp"] and not dist.requires
    compiled = [f for f in dist.files if f.suffix in (".so", ".pyd", ".dylib")]
    assert compiled == []
    assert "root-is-purelib: true" in (dist.read_text("WHEEL") or "").lower()


def test_make_modelarts_runs_the_installer_with_the_images_python():
    out = subprocess.run(["make", "-n", "modelarts", "modelarts-course",
                          "MODELARTS_PYTHON=/opt/img/bin/python"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    assert "/opt/img/bin/python tools/modelarts.py install" in out
    assert re.search(r"COURSE_HEADLESS=1 .*/opt/img/bin/python tools/run_course.py", out)
    assert "pip install" not in out and ".venv" not in out


class _FakeMindSpore:
    """Records what _ascend_settings asks of MindSpore (no Ascend card on this machine)."""
    def __init__(self):
        self.calls, self.context = [], {"device_id": 0, "jit_level": "", "max_device_memory": 1024.0}
        self.runtime = self

    def set_device(self, *args):
        self.calls.append(("set_device", args))
        self.context["device_id"] = args[1] if len(args) > 1 else 0

    def set_memory(self, max_size):     # like MindSpore 2.7: the context's max_device_memory stays
        self.calls.append(("set_memory", max_size))

    def get_context(self, key):
        return self.context[key]


def test_set_memory_leaves_the_context_value_the_status_line_cannot_read_it():
    """Why _ascend_settings reports the cap it set: MindSpore's runtime.set_memory does not
    change get_context("max_device_memory") (checked here on the CPU, in a fresh process)."""
    code = ("import mindspore as ms; before = ms.get_context('max_device_memory'); "
            "ms.runtime.set_memory(max_size='2GB'); "
            "print(before, ms.get_context('max_device_memory'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env=dict(os.environ, GLOG_v="3")).stdout.split()
    assert out[0] == out[1], out


def test_setup_on_ascend_sets_card_and_memory_and_says_so(monkeypatch):
    from course_lib.runtime import _ascend_settings
    monkeypatch.delenv("DEVICE_ID", raising=False)
    monkeypatch.delenv("COURSE_ASCEND_MEMORY", raising=False)
    ms = _FakeMindSpore()
    assert _ascend_settings(ms) == "card 0 | jit_level O0 (default) | memory pool whole card"
    assert ms.calls == [("set_device", ("Ascend",))]
    monkeypatch.setenv("DEVICE_ID", "3")
    monkeypatch.setenv("COURSE_ASCEND_MEMORY", "30GB")
    ms = _FakeMindSpore()
    assert _ascend_settings(ms) == "card 3 | jit_level O0 (default) | memory pool <= 30GB"
    assert ms.calls == [("set_device", ("Ascend", 3)), ("set_memory", "30GB")]


def _pypi_reachable() -> bool:
    try:
        urllib.request.urlopen("https://pypi.org/simple/pip/", timeout=10).close()
        return True
    except OSError:
        return False


def _wheel_fits_aarch64(filename: str) -> bool:
    tags = filename[:-len(".whl")].split("-")[-3:]      # python, abi, platform
    platforms = tags[2].split(".")
    return tags[2] == "any" or any(p in modelarts.AARCH64 for p in platforms)


@pytest.mark.network
@pytest.mark.slow
def test_profile_resolves_for_linux_aarch64_python311_binary_wheels():
    if not _pypi_reachable():
        pytest.skip("PyPI is not reachable from this machine")
    image_mindspore = "mindspore==2.7.1"           # stands in for the image's own build
    report = modelarts.resolve(extra=[image_mindspore])   # pip fails on a missing wheel
    got = {modelarts.canonicalize_name(i["metadata"]["name"]): i for i in report["install"]}
    assert set(got) == (set(PROFILE) - {"snownlp"}) | {"mindspore"}
    glibc = []
    for name, item in got.items():
        url = item["download_info"]["url"]
        assert url.endswith(".whl") and _wheel_fits_aarch64(url.rsplit("/", 1)[-1]), url
        tags = re.findall(r"manylinux_2_(\d+)_aarch64", url) + \
            (["17"] if "manylinux2014_aarch64" in url else [])
        glibc.append(min(map(int, tags)) if tags else 0)
    assert f"2.{max(glibc)}" == modelarts.GLIBC_MIN      # what the installer checks
    # The closure: every requirement (aarch64 markers) is met by the profile itself, except
    # the two named exceptions (mindnlp's mindspore cap, torch left out).
    versions = {n: i["metadata"]["version"] for n, i in got.items()}
    versions["snownlp"] = PROFILE["snownlp"]
    requires = {n: i["metadata"].get("requires_dist") or [] for n, i in got.items()}
    problems = {p for p in modelarts.unmet(versions, requires, env=AARCH64_ENV)
                if p[1].split("<")[0].split(">")[0] not in FREEZE_OMITS}
    assert [p for p in problems if modelarts.allowed(p) is None] == []
    assert {p[0] for p in problems} >= {"mindnlp"}


def test_installer_and_package_accept_the_same_mindspore():
    import tomllib
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    spec = [d for d in deps if d.startswith("mindspore")]
    assert spec == [f"mindspore{modelarts.MINDSPORE}"] or \
        modelarts.SpecifierSet(spec[0].removeprefix("mindspore")) == modelarts.MINDSPORE
    assert "2.7.1" in modelarts.MINDSPORE and "2.7.0rc1" not in modelarts.MINDSPORE


def test_instructor_page_names_every_notebook_and_test_that_needs_pytorch():
    """torch is optional on ModelArts: the page must list exactly what needs it."""
    import json
    page = (ROOT / "docs" / "instructors.md").read_text(encoding="utf-8")
    english = page[page.index("# English"):]
    needs = {p.stem for p in (ROOT / "tests").glob("test_*.py")
             if re.search(r"^\s*(import torch|from torch)\b|importorskip\(.torch",
                          p.read_text(encoding="utf-8"), flags=re.M)}
    paragraph = english.split("The unit tests that import torch:")[1].split("To get those cells")[0]
    listed = set(re.findall(r"\b(test_\w+)", paragraph))
    assert needs and listed == needs
    found = []
    for nb in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        cells = json.loads(nb.read_text(encoding="utf-8"))["cells"]
        uses = [i for i, c in enumerate(cells) if c["cell_type"] == "code"
                and re.search(r"^\s*import (numpy as np, )?torch\b", "".join(c["source"]), re.M)]
        if uses and not nb.name.startswith("11_"):          # 11: torch is mindnlp's mindtorch
            found.append(nb.name[:2])
            assert f"chapter {nb.name[:2]}" in english, (nb.name, uses)
    assert found, "no notebook imports torch: update the instructor page"


def test_kernel_gets_canns_environment_only_on_ascend():
    shell = {"HOME": "/home/ma-user", "PATH": "/usr/bin", "LD_LIBRARY_PATH": "/lib",
             "ASCEND_HOME_PATH": "/usr/local/Ascend/ascend-toolkit/latest", "TERM": "xterm"}
    assert modelarts.ascend_env(shell) == {k: shell[k] for k in
                                           ("PATH", "LD_LIBRARY_PATH", "ASCEND_HOME_PATH")}
    assert modelarts.ascend_env({"PATH": "/usr/bin", "LD_LIBRARY_PATH": "/lib"}) == {}
