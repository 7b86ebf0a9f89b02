"""LivePlot and static helpers (headless: no display, one figure on demand)."""
import numpy as np
import pytest

from course_lib.plots import LivePlot, ema, plot_history, plot_lr


def test_ema_is_bias_corrected_closed_form():
    values = [4.0, 2.0, 3.0]
    a = 0.5
    raw = [a * 4.0, (1 - a) * a * 4.0 + a * 2.0]
    raw.append((1 - a) * raw[1] + a * 3.0)
    expected = [r / (1 - (1 - a) ** (i + 1)) for i, r in enumerate(raw)]
    np.testing.assert_allclose(ema(values, a), expected)
    assert ema([5.0], 0.1)[0] == pytest.approx(5.0)


def test_live_plot_collects_and_draws_panels_headless():
    plot = LivePlot(("loss", "val_loss"), "val_f1", every=2, live=True)
    assert plot.live is False            # not inside IPython: nothing to update live
    for step in range(1, 31):
        plot.add(step, loss=1.0 / step)
    plot.add(30, val_loss=0.2, val_f1=0.8)
    fig = plot.figure()
    assert [ax.get_title() for ax in fig.axes] == ["loss / val_loss", "val_f1"]
    labels = [line.get_label() for line in fig.axes[0].lines]
    assert labels == ["loss", "val_loss"]
    with pytest.raises(KeyError, match="no key"):
        plot.add(31, accuracy=0.5)


def test_smoothing_adds_an_ema_line_for_long_series():
    plot = LivePlot("loss", smooth=0.1, live=False)
    for step in range(50):
        plot.add(step, loss=float(np.sin(step)))
    assert [l.get_label() for l in plot.figure().axes[0].lines] == ["loss", "loss (EMA)"]


def test_plot_history_and_lr():
    fig = plot_history({"step": [1, 2, 3], "loss": [3.0, 2.0, 1.5], "lr": [1, 2, 3]},
                       "loss", "lr")
    assert len(fig.axes) == 2
    assert list(fig.axes[0].lines[0].get_ydata()) == [3.0, 2.0, 1.5]
    with pytest.raises(KeyError, match="no 'acc'"):
        plot_history({"step": [1], "loss": [1.0]}, "acc")
    assert len(plot_lr([0.1, 0.2]).axes) == 1
