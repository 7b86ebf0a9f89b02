"""Exercise checkers: ``from course_lib.check import ch00; ch00.ex1(answer)``.

Each checker prints a verdict (with a hint when wrong) and returns True/False, so the
tests can prove it accepts the reference answer and rejects a wrong one.
"""
