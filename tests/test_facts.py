"""cl.fact: a fact the book states is printed when it holds and fails loudly when it does not."""
import numpy as np
import pytest

import course_lib as cl


def test_a_fact_that_holds_is_printed(capsys):
    cl.fact("two plus two is four", 2 + 2 == 4, "2 + 2 = 4")
    assert capsys.readouterr().out == "✔ two plus two is four (2 + 2 = 4)\n"


def test_a_fact_that_does_not_hold_raises_naming_the_claim(capsys):
    with pytest.raises(cl.FactError, match="loss within 0.1 of ln"):
        cl.fact("loss within 0.1 of ln(8000)", abs(9.5 - np.log(8000)) < 0.1, "loss 9.500")
    assert capsys.readouterr().out == ""


def test_numpy_booleans_count_and_non_booleans_are_refused():
    cl.fact("numpy says equal", np.array_equal([1, 2], [1, 2]))
    cl.fact("numpy bool", np.bool_(True))
    with pytest.raises(TypeError, match="must be a bool"):
        cl.fact("an array is not a fact", np.array([True, False]))
    with pytest.raises(TypeError, match="must be a bool"):
        cl.fact("a string is not a fact", "yes")
    with pytest.raises(TypeError, match="non-empty"):
        cl.fact("", True)
