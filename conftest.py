"""Repo-wide pytest hooks: print wall time per test file / notebook at the end of a run,
so `make test` reports how long each notebook took under nbval."""
from collections import defaultdict

_seconds = defaultdict(float)


def pytest_runtest_logreport(report):
    _seconds[report.nodeid.split("::")[0]] += report.duration


def pytest_terminal_summary(terminalreporter):
    if not _seconds:
        return
    terminalreporter.section("wall time per file")
    for path, secs in sorted(_seconds.items()):
        terminalreporter.write_line(f"{secs:8.1f} s  {path}")
