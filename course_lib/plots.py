"""Loss / metric plots: a live plot for training loops and static helpers for histories.

``LivePlot`` redraws one figure in place while training runs in JupyterLab (an IPython
display handle is updated, no new output per step). Headless (``cl.interactive()`` is
False, e.g. under ``make test``) it only collects the points and draws ONE static figure
when ``show()`` is called at the end. Labels are English: matplotlib has no CJK font here.

    plot = LivePlot(("loss", "val_loss"), "val_f1", every=10)
    for step ...: plot.add(step, loss=..., val_loss=...)
    plot.show()
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np


def _in_ipython() -> bool:
    try:
        from IPython import get_ipython
        return get_ipython() is not None
    except ImportError:
        return False


def ema(values: Sequence[float], alpha: float = 0.1) -> np.ndarray:
    """Exponential moving average (bias-corrected, so it starts at the first value)."""
    out, avg = [], 0.0
    for i, v in enumerate(values, start=1):
        avg = (1 - alpha) * avg + alpha * float(v)
        out.append(avg / (1 - (1 - alpha) ** i))
    return np.asarray(out)


class LivePlot:
    """One panel per argument; a panel is a key (``"loss"``) or a tuple of keys drawn on
    the same axes (``("loss", "val_loss")``). ``smooth`` adds an EMA line for keys with
    many points (noisy per-step losses)."""

    def __init__(self, *panels, every: int = 10, title: str | None = None, xlabel: str = "step",
                 live: bool | None = None, smooth: float | None = None, logy: Sequence[str] = ()):
        if not panels:
            panels = ("loss",)
        self.panels = [tuple([p]) if isinstance(p, str) else tuple(p) for p in panels]
        for panel in self.panels:
            if not panel or not all(isinstance(k, str) and k for k in panel):
                raise ValueError(f"A panel must be a key or a tuple of keys, got {panel!r}")
        if every < 1:
            raise ValueError(f"every must be >= 1, got {every}")
        self.keys = [k for panel in self.panels for k in panel]
        self.every, self.title, self.xlabel = every, title, xlabel
        self.smooth, self.logy = smooth, set(logy)
        if live is None:
            from .runtime import interactive
            live = interactive()
        self.live = bool(live) and _in_ipython()
        self.data: dict[str, tuple[list, list]] = {k: ([], []) for k in self.keys}
        self._adds = 0
        self._fig = None
        self._handle = None

    # --- data ------------------------------------------------------------------------
    def add(self, step, **values) -> None:
        """Record values at ``step``; keys must be among the plot's keys."""
        unknown = sorted(set(values) - set(self.keys))
        if unknown:
            raise KeyError(f"LivePlot has no key(s) {unknown}; its keys are {self.keys}. "
                           "Declare them when creating the plot, e.g. LivePlot(('loss', "
                           "'val_loss')).")
        for key, value in values.items():
            if value is None:
                continue
            xs, ys = self.data[key]
            xs.append(step)
            ys.append(float(value))
        self._adds += 1
        if self.live and self._adds % self.every == 0:
            self._redraw()

    # --- drawing -----------------------------------------------------------------------
    def figure(self):
        """Draw the current data into a (new or reused) matplotlib figure and return it."""
        import matplotlib.pyplot as plt
        if self._fig is None:
            width = max(5.0, 4.5 * len(self.panels))
            self._fig, _ = plt.subplots(1, len(self.panels), figsize=(width, 3.4), squeeze=False)
            plt.close(self._fig)   # we display it ourselves: no duplicate inline copy
        for ax, panel in zip(self._fig.axes, self.panels):
            ax.clear()
            for key in panel:
                xs, ys = self.data[key]
                if not xs:
                    continue
                many = len(xs) > 20 and self.smooth
                line, = ax.plot(xs, ys, alpha=0.35 if many else 1.0,
                                marker=None if len(xs) > 20 else "o", ms=3, label=key)
                if many:
                    ax.plot(xs, ema(ys, self.smooth), color=line.get_color(),
                            label=f"{key} (EMA)")
            if any(k in self.logy for k in panel):
                ax.set_yscale("log")
            ax.set_xlabel(self.xlabel)
            ax.set_title(" / ".join(panel))
            ax.grid(alpha=0.3)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=8)
        if self.title:
            self._fig.suptitle(self.title)
        self._fig.tight_layout()
        return self._fig

    def _redraw(self):
        from IPython.display import display
        fig = self.figure()
        if self._handle is None:
            self._handle = display(fig, display_id=True)
        else:
            self._handle.update(fig)

    def show(self):
        """Final picture: updates the live figure, or (headless) displays it once."""
        fig = self.figure()
        if self.live:
            self._redraw()
        elif _in_ipython():
            from IPython.display import display
            display(fig)
        return fig

    def save(self, path) -> None:
        self.figure().savefig(path, dpi=90, bbox_inches="tight")


def plot_history(history: Mapping[str, Sequence[float]], *panels, x: str = "step",
                 title: str | None = None, smooth: float | None = None, logy: Sequence[str] = ()):
    """A static LivePlot over a finished history dict (lists per key, ``x`` the x-axis)."""
    if x not in history:
        raise KeyError(f"history has no {x!r} column; it has {sorted(history)}")
    panels = panels or tuple(k for k in history if k != x)
    plot = LivePlot(*panels, title=title, live=False, smooth=smooth, logy=logy)
    for key in plot.keys:
        if key not in history:
            raise KeyError(f"history has no {key!r}; it has {sorted(history)}")
        xs = history[x][-len(history[key]):] if len(history[key]) <= len(history[x]) else None
        if xs is None:
            raise ValueError(f"history[{key!r}] is longer than history[{x!r}]")
        plot.data[key] = (list(xs), [float(v) for v in history[key]])
    return plot.show()


def plot_lr(schedule: Sequence[float], title: str = "learning-rate schedule"):
    """The per-step learning rate of a schedule list."""
    return plot_history({"step": list(range(1, len(schedule) + 1)), "lr": list(schedule)},
                        "lr", title=title)
