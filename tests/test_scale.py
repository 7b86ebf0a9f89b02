"""course_lib.scale: the COURSE_SCALE knob and running a block at another scale."""
import os

import pytest

from course_lib.scale import at_scale, current_scale, pick


def test_at_scale_sets_the_scale_and_restores_an_unset_variable(monkeypatch):
    monkeypatch.delenv("COURSE_SCALE", raising=False)
    with at_scale("ci"):
        assert current_scale() == "ci" and pick(ci=1, full=2) == 1
    assert "COURSE_SCALE" not in os.environ
    assert current_scale() == "full"


def test_at_scale_restores_the_previous_value_after_an_error(monkeypatch):
    monkeypatch.setenv("COURSE_SCALE", "ci")
    with pytest.raises(RuntimeError):
        with at_scale("full"):
            assert current_scale() == "full"
            raise RuntimeError("inside the block")
    assert current_scale() == "ci"


def test_at_scale_rejects_an_unknown_scale(monkeypatch):
    monkeypatch.setenv("COURSE_SCALE", "ci")
    with pytest.raises(ValueError, match="Unknown scale 'huge'"):
        with at_scale("huge"):
            pass
    assert current_scale() == "ci"
