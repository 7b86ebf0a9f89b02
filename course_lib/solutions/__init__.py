"""Reference solutions of the code exercises, one module per chapter (``ch06.py`` ...).

Never imported by a notebook before its exercise: a learner loads one deliberately with
``course_lib.check.show_solution("ch06.rms_norm")`` after trying. Each module may also hold
realistic WRONG solutions (names starting with ``wrong_``) that ``python -m course_lib.check
--self-test`` feeds to the checkers to prove they are rejected with the right hint.
"""
