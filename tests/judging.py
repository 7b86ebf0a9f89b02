"""The grader's verdict on one checker call, for the checker tests: the learner's call and
the reference's are recorded, sent through the grader's wire format (JSON, as from the
learner's process) and judged by ``course_lib.grade.judge`` from their observations alone."""
import dataclasses
import json

from course_lib.check.common import recording
from course_lib.grade.judge import decode_record, encode_record, judge_run


def _wire(run):
    return decode_record(json.loads(json.dumps(encode_record(dataclasses.replace(run, provenance=None)))))


def verdicts(check, reference, *mine) -> list[str]:
    """The verdict on ``check(m)`` for each ``m`` in ``mine``, against ``check(reference)``."""
    with recording() as runs:
        check(reference)
        for m in mine:
            check(m)
    ref, *got = (_wire(r) for r in runs)
    return [judge_run(run, ref).verdict for run in got]


def judged(check, mine, reference) -> str:
    """The verdict on ``check(mine)`` against ``check(reference)``."""
    return verdicts(check, reference, mine)[0]


def salt_misses(check, wrongs, salts, monkeypatch, capsys) -> list[tuple[int, str]]:
    """(salt, wrong answer's name) for every grading salt in ``salts`` under which ``check``
    accepted a wrong answer of ``wrongs`` ((function or class, expected hint) pairs) or
    rejected it without its hint: the gradebook draws a new salt per session."""
    misses = []
    for salt in salts:
        monkeypatch.setenv("COURSE_CHECK_SALT", str(salt))
        for wrong, hint in wrongs:
            ok, out = check(wrong), capsys.readouterr().out
            if ok or hint not in out:
                misses.append((salt, wrong.__name__))
    return misses
