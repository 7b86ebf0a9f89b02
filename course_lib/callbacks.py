"""MindSpore ``Callback`` classes that work with ``Model.train`` AND ``LLMTrainer``.

Both fill the same ``run_context.original_args()`` fields (``cur_step_num``,
``cur_epoch_num``, ``batch_num``, ``epoch_num``, ``net_outputs``, ``optimizer``,
``train_network``); ``LLMTrainer`` adds ``trainer``, ``loss``, ``lr`` and ``grad_norm``.

Learning rate inside a callback
* WRONG: ``optimizer.learning_rate = x`` (:class:`NaiveLRSetter`). A float raises
  TypeError (the attribute is a Parameter). A Tensor replaces the Parameter's storage:
  GRAPH mode picks it up, but in PyNative the step measurably uses another value — the
  update silently becomes 0 or garbage (:func:`probe_lr` measures it). Why PyNative differs
  is not established; chapter 04 gives its hypothesis (the compiled ``@jit`` optimizer step
  reading the old storage) as a hypothesis.
* RIGHT: write into the existing Parameter with ``ops.assign`` (:class:`AssignLR`),
  MindSpore's ``LearningRateScheduler`` (which does exactly that), or give the optimizer a
  per-step list (dynamic lr: no callback at all).

Other callbacks: :class:`History`, :class:`EvalEvery`, :class:`EarlyStopping`,
:class:`CheckpointSaver` (+
:func:`restore_checkpoint`), :class:`ProgressBar` (tqdm), :class:`LiveLossPlot`.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Mapping, Sequence

import mindspore as ms
import mindspore.dataset as ds
import numpy as np
from mindspore import Parameter, Tensor, nn, ops
from mindspore.train import Callback, LearningRateScheduler, Model

from .hf_weights import check_compatible
from .plots import LivePlot
from .runtime import IsolatedError, execution_mode, progress, run_isolated
from .safeio import save_checkpoint_atomic


# --------------------------------------------------------------------------------------
# Reading the run context
# --------------------------------------------------------------------------------------
def loss_of(cb) -> float:
    """The step's loss as a float from ``Model`` (Tensor or tuple) or ``LLMTrainer``."""
    if cb.get("loss") is not None:
        return float(cb["loss"])
    out = cb.get("net_outputs")
    if isinstance(out, (tuple, list)):      # e.g. (loss, overflow, loss_scale)
        out = out[0]
    return float(out.asnumpy()) if hasattr(out, "asnumpy") else float(out)


def current_lr(optimizer: nn.Optimizer, step: int | None = None) -> float:
    """The learning rate for the optimizer's 1-based step ``step`` (default: the step just
    taken, from ``global_step``): a schedule table is indexed, a scalar Parameter read."""
    lr = optimizer.learning_rate
    if isinstance(lr, (tuple, list)) or getattr(optimizer, "is_group_lr", False):
        lr = lr[0]
    if optimizer.dynamic_lr:
        table = lr.learning_rate.asnumpy()
        done = int(optimizer.global_step.asnumpy().reshape(-1)[0]) if step is None else step
        return float(table[min(max(done - 1, 0), len(table) - 1)])
    return float(lr.asnumpy()) if hasattr(lr, "asnumpy") else float(lr)


def last_eval(cb):
    """``(step, results)`` of the latest evaluation published in the run context — by
    :class:`EarlyStopping` (``last_eval``) or by ``Model.fit`` (``eval_results``) — or None."""
    if cb.get("last_eval"):
        return cb["last_eval"]
    if cb.get("eval_results"):
        return int(cb.cur_step_num), cb["eval_results"]
    return None


def _lr_of(cb) -> float:
    return float(cb["lr"]) if cb.get("lr") is not None else current_lr(cb["optimizer"])


# --------------------------------------------------------------------------------------
# Learning rate
# --------------------------------------------------------------------------------------
class NaiveLRSetter(Callback):
    """THE PITFALL, kept for the lesson: ``optimizer.learning_rate = schedule(step)``.
    Do not use it; see the module docstring and :func:`probe_lr`."""

    def __init__(self, schedule: Callable[[int], float], as_tensor: bool = False):
        self.schedule, self.as_tensor = schedule, as_tensor

    def on_train_step_begin(self, run_context):
        cb = run_context.original_args()
        value = self.schedule(cb.cur_step_num - 1)
        cb.optimizer.learning_rate = Tensor(value, ms.float32) if self.as_tensor else value


class AssignLR(Callback):
    """Set the lr of every step: ``ops.assign(optimizer.learning_rate, schedule(i))`` before
    0-based step ``i`` runs. Writes into the Parameter the compiled step already reads."""

    def __init__(self, schedule: Callable[[int], float]):
        self.schedule = schedule

    def on_train_step_begin(self, run_context):
        cb = run_context.original_args()
        lr = cb.optimizer.learning_rate
        if cb.optimizer.dynamic_lr or not isinstance(lr, Parameter):
            raise ValueError("AssignLR needs an optimizer built with a single float learning "
                             "rate; this one already has a per-step schedule (dynamic lr), "
                             "which needs no callback.")
        ops.assign(lr, Tensor(self.schedule(cb.cur_step_num - 1), ms.float32))


class _Probe(nn.Cell):
    """loss = w * x with x = 1: dloss/dw = 1, so one SGD step moves w by exactly -lr."""

    def __init__(self):
        super().__init__()
        self.w = Parameter(Tensor(np.zeros(1, np.float32)), name="w")

    def construct(self, x):
        return (self.w * x).sum()


LR_METHODS = ("constant", "attr_float", "attr_tensor", "assign", "scheduler", "dynamic_list")


def probe_lr(method: str = "constant", mode: str = "pynative", steps: int = 4,
             base_lr: float = 0.1, isolated: bool = False, callbacks: Sequence[Callback] = ()):
    """Train the one-weight probe with ``Model.train`` for ``steps`` steps while trying to
    follow ``lr_i = base_lr / (i + 1)`` by ``method``; return the lr each step REALLY used
    (read off the weight change) or the error it raised, as ``"TypeError: ..."``.

    ``isolated=True`` runs it in a fresh Python process: with ``attr_tensor`` in PyNative the
    compiled optimizer does not use the value the callback set (chapter 04's hypothesis: it
    reads the replaced, freed storage) — never do that in a process you care about.
    ``callbacks``: your own lr callbacks to measure (with ``method="constant"``: the
    optimizer starts at ``base_lr`` and only your callbacks change it).
    """
    if method not in LR_METHODS:
        raise ValueError(f"Unknown method {method!r}; choose from {LR_METHODS}.")
    if isolated and callbacks:
        raise ValueError("isolated=True runs a named method in a new process; it cannot "
                         "take callback objects.")
    if isolated:
        try:
            return run_isolated(_probe_lr_fresh, method=method, mode=mode, steps=steps,
                                base_lr=base_lr, timeout=300)
        except IsolatedError as err:
            return f"crashed (exit code {err.exit_code})"

    def wanted(i):
        return base_lr / (i + 1)

    net = _Probe()
    lr = [wanted(i) for i in range(steps)] if method == "dynamic_list" else base_lr
    opt = nn.SGD(net.trainable_params(), learning_rate=lr)
    callbacks = {"attr_float": [NaiveLRSetter(wanted)],
                 "attr_tensor": [NaiveLRSetter(wanted, as_tensor=True)],
                 "assign": [AssignLR(wanted)],
                 # LearningRateScheduler(f(lr, step)) sets the lr of the NEXT step at step_end
                 "scheduler": [LearningRateScheduler(lambda _lr, step: wanted(step))]
                 }.get(method, []) + list(callbacks)
    weights = []

    class _Record(Callback):
        def on_train_step_end(self, run_context):
            weights.append(float(net.w.asnumpy()[0]))

    data = ds.NumpySlicesDataset({"x": np.ones((steps, 1), np.float32)}, shuffle=False).batch(1)
    try:
        with execution_mode(mode):
            Model(net, optimizer=opt).train(1, data, callbacks=callbacks + [_Record()],
                                            dataset_sink_mode=False)
    except Exception as err:  # the lesson is which error
        return f"{type(err).__name__}: {(str(err).splitlines() or [''])[0][:120]}"
    before = [0.0] + weights[:-1]
    return [round(b - a, 6) for b, a in zip(before, weights)]


def _probe_lr_fresh(method: str, mode: str, steps: int, base_lr: float):
    """``probe_lr`` as the whole life of a fresh process (``isolated=True``)."""
    from .runtime import setup
    setup(device="CPU", quiet=True, seed=0)
    return probe_lr(method, mode, steps, base_lr)


# --------------------------------------------------------------------------------------
# Bookkeeping
# --------------------------------------------------------------------------------------
class History(Callback):
    """Per-step ``step``, ``loss``, ``lr`` (+ ``eval`` results published by an evaluating
    callback) — the loss curve of a ``Model.train`` run as plain lists."""

    def __init__(self):
        self.history = {"step": [], "loss": [], "lr": []}
        self.evals: list[tuple[int, dict]] = []

    def on_train_step_end(self, run_context):
        cb = run_context.original_args()
        self.history["step"].append(int(cb.cur_step_num))
        self.history["loss"].append(loss_of(cb))
        self.history["lr"].append(_lr_of(cb))
        self._collect_eval(cb)

    def on_train_epoch_end(self, run_context):
        self._collect_eval(run_context.original_args())

    def on_train_end(self, run_context):   # an evaluation made by a later callback
        self._collect_eval(run_context.original_args())

    def _collect_eval(self, cb):
        found = last_eval(cb)
        if found and (not self.evals or self.evals[-1][0] != found[0]):
            self.evals.append((int(found[0]), dict(found[1])))


def _lower_is_better(name: str) -> bool:
    return name.endswith("loss") or name in ("perplexity", "ppl", "error")


class EarlyStopping(Callback):
    """Stop when the validation metric ``monitor`` has not improved for ``patience``
    evaluations; ``restore_best``: at the end, put back the weights of the best evaluation.

    ``evaluate() -> dict`` runs the validation (e.g. ``lambda: model.eval(val_ds)`` for
    ``Model``, default ``trainer.evaluate`` under ``LLMTrainer``); it runs every
    ``every_n_steps`` steps, or at every epoch end if that is None. The results are also
    published in the run context (``last_eval`` = (step, results), read by
    :class:`LiveLossPlot` and :class:`History`).
    ``mode`` "min"/"max"/"auto" (auto: min for names ending in loss and for perplexity).
    """

    def __init__(self, monitor: str = "loss", evaluate: Callable[[], Mapping] | None = None,
                 patience: int = 2, mode: str = "auto", min_delta: float = 0.0,
                 every_n_steps: int | None = None, restore_best: bool = True):
        if not isinstance(monitor, str) or not monitor:
            raise ValueError(f"monitor must be a metric name, got {monitor!r}")
        if mode not in ("auto", "min", "max"):
            raise ValueError(f"mode must be 'auto', 'min' or 'max', got {mode!r}")
        if patience < 1 or (every_n_steps is not None and every_n_steps < 1):
            raise ValueError("patience and every_n_steps must be >= 1")
        self.monitor, self.evaluate, self.patience = monitor, evaluate, patience
        self.minimize = _lower_is_better(monitor) if mode == "auto" else mode == "min"
        self.min_delta, self.every_n_steps, self.restore_best = min_delta, every_n_steps, restore_best
        self.scores: list[tuple[int, float]] = []
        self.best, self.best_step, self.stopped_step = None, None, None
        self._waited, self._best_weights = 0, None

    def _improved(self, value: float) -> bool:
        if self.best is None:
            return True
        return value < self.best - self.min_delta if self.minimize else value > self.best + self.min_delta

    def _run_eval(self, run_context):
        cb = run_context.original_args()
        evaluate = self.evaluate
        if evaluate is None:
            if cb.get("trainer") is None:
                raise ValueError("EarlyStopping needs evaluate=... (e.g. lambda: "
                                 "model.eval(val_ds)) when used with Model.train.")
            evaluate = cb.trainer.evaluate
        results = dict(evaluate())
        if self.monitor not in results:
            raise KeyError(f"EarlyStopping monitors {self.monitor!r}, but the evaluation "
                           f"returned only {sorted(results)}. Use one of those names (or add "
                           "the metric to Model(..., metrics={...})).")
        step = int(cb.cur_step_num)
        # Model.train pops "eval_results" after each epoch end: publish under our own key too
        cb["eval_results"], cb["last_eval"] = results, (step, results)
        value = float(results[self.monitor])
        self.scores.append((step, value))
        if self._improved(value):
            self.best, self.best_step, self._waited = value, step, 0
            if self.restore_best:
                self._best_weights = [p.asnumpy().copy() for p in cb.optimizer.parameters]
        else:
            self._waited += 1
            if self._waited >= self.patience:
                self.stopped_step = step
                run_context.request_stop()

    def on_train_step_end(self, run_context):
        cb = run_context.original_args()
        if self.every_n_steps and cb.cur_step_num % self.every_n_steps == 0:
            self._run_eval(run_context)

    def on_train_epoch_end(self, run_context):
        if not self.every_n_steps:
            self._run_eval(run_context)

    def on_train_end(self, run_context):
        # put the best weights back whether training stopped early or ran out of steps
        # (not after an Interrupt: train() may continue from where it stopped)
        if run_context.original_args().get("interrupted"):
            return
        if self.restore_best and self._best_weights is not None:
            params = run_context.original_args().optimizer.parameters
            for p, value in zip(params, self._best_weights):
                p.set_data(Tensor(value, p.dtype))


class EvalEvery(Callback):
    """Evaluate every ``every_n_steps`` steps (and at the end of training) and publish the
    results in the run context, for :class:`LiveLossPlot`/:class:`History`; ``evaluate``
    defaults to ``trainer.evaluate`` under ``LLMTrainer``. ``self.results`` keeps them all."""

    def __init__(self, every_n_steps: int, evaluate: Callable[[], Mapping] | None = None):
        if every_n_steps < 1:
            raise ValueError(f"every_n_steps must be >= 1, got {every_n_steps}")
        self.every_n_steps, self.evaluate = every_n_steps, evaluate
        self.results: list[tuple[int, dict]] = []

    def _run(self, cb):
        evaluate = self.evaluate
        if evaluate is None:
            if cb.get("trainer") is None:
                raise ValueError("EvalEvery needs evaluate=... when used with Model.train.")
            evaluate = cb.trainer.evaluate
        step = int(cb.cur_step_num)
        if self.results and self.results[-1][0] == step:
            return
        results = dict(evaluate())
        self.results.append((step, results))
        cb["eval_results"], cb["last_eval"] = results, (step, results)

    def on_train_step_end(self, run_context):
        cb = run_context.original_args()
        if cb.cur_step_num % self.every_n_steps == 0:
            self._run(cb)

    def on_train_end(self, run_context):
        cb = run_context.original_args()
        if not cb.get("interrupted"):    # an Interrupt should stop, not start an evaluation
            self._run(cb)


class CheckpointSaver(Callback):
    """Save every ``every_n_steps`` steps (or every epoch end) into ``directory``.

    With ``LLMTrainer`` it calls ``trainer.save`` (weights + optimizer + data position);
    with ``Model`` it saves the train network (weights + optimizer state) plus ``step`` and
    ``epoch``; resume with :func:`restore_checkpoint` and ``Model.train(...,
    initial_epoch=epoch)``. ``keep`` = how many recent files to keep (None = all)."""

    def __init__(self, directory, every_n_steps: int | None = None, prefix: str = "ckpt",
                 keep: int | None = None):
        if every_n_steps is not None and every_n_steps < 1:
            raise ValueError(f"every_n_steps must be >= 1, got {every_n_steps}")
        self.directory = Path(directory)
        self.every_n_steps, self.prefix, self.keep = every_n_steps, prefix, keep
        self.saved: list[Path] = []

    def _save(self, cb):
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / f"{self.prefix}-step{int(cb.cur_step_num):06d}.ckpt"
        if cb.get("trainer") is not None:
            cb.trainer.save(path)
        else:
            save_checkpoint_atomic(cb.train_network, path,
                                   append_dict={"step": int(cb.cur_step_num),
                                                "epoch": int(cb.cur_epoch_num)})
        self.saved.append(path)
        while self.keep and len(self.saved) > self.keep:
            self.saved.pop(0).unlink(missing_ok=True)

    def on_train_step_end(self, run_context):
        cb = run_context.original_args()
        if self.every_n_steps and cb.cur_step_num % self.every_n_steps == 0:
            self._save(cb)

    def on_train_epoch_end(self, run_context):
        if not self.every_n_steps:
            self._save(run_context.original_args())

    @property
    def latest(self) -> Path:
        if not self.saved:
            raise FileNotFoundError(f"No checkpoint saved yet in {self.directory}.")
        return self.saved[-1]


def restore_checkpoint(path, *cells: nn.Cell) -> dict:
    """Load a :class:`CheckpointSaver` (``Model``) checkpoint into ``cells`` — typically the
    network and its optimizer — and return ``{"step": ..., "epoch": ...}``. Every parameter
    of every cell must be in the file, with the same shape; otherwise the error names them."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"No checkpoint at {path}.")
    try:
        saved = ms.load_checkpoint(str(path))
    except Exception as err:
        raise ValueError(f"Cannot read checkpoint {path}: corrupt or not a MindSpore "
                         f"checkpoint ({type(err).__name__}).") from err
    meta = {k: int(np.asarray(saved.pop(k).asnumpy())) for k in ("step", "epoch") if k in saved}
    check_compatible({p.name: tuple(p.shape) for cell in cells for p in cell.get_parameters()},
                     saved, source=str(path), target="these cells", unexpected_ok=True)
    for cell in cells:
        ms.load_param_into_net(cell, saved)
    return meta


# --------------------------------------------------------------------------------------
# Watching a run
# --------------------------------------------------------------------------------------
class ProgressBar(Callback):
    """A tqdm bar over the steps of this ``train`` call, with loss and lr."""

    def __init__(self, total: int | None = None, desc: str = "train", every: int = 1):
        self.total, self.desc, self.every = total, desc, max(1, every)
        self.bar = None

    def on_train_begin(self, run_context):
        cb = run_context.original_args()
        total = self.total or cb.get("steps_this_call") or \
            max(0, cb.epoch_num * cb.batch_num - int(cb.get("cur_step_num") or 0))
        self.bar = progress(total=total or None, desc=self.desc, dynamic_ncols=True)

    def on_train_step_end(self, run_context):
        cb = run_context.original_args()
        self.bar.update(1)
        if cb.cur_step_num % self.every == 0:
            self.bar.set_postfix(loss=f"{loss_of(cb):.4f}", lr=f"{_lr_of(cb):.2e}", refresh=False)

    def on_train_end(self, run_context):
        if self.bar is not None:
            self.bar.close()


class LiveLossPlot(Callback):
    """Training loss per step plus any evaluation results published in the run context
    (``eval_results``, e.g. by :class:`EarlyStopping` or ``Model.fit``), live in JupyterLab,
    one static figure at the end when headless.

    ``metrics``: evaluation keys to plot; ``"loss"`` shares the training-loss panel
    (as ``val_loss``), every other metric gets its own panel."""

    def __init__(self, metrics: Sequence[str] = (), every: int = 10, smooth: float | None = 0.1,
                 title: str | None = None, live: bool | None = None, logy: Sequence[str] = ()):
        self.metrics = tuple(metrics)
        first = ("loss", "val_loss") if "loss" in self.metrics else ("loss",)
        others = [f"val_{m}" for m in self.metrics if m != "loss"]
        self.plot = LivePlot(first, *others, every=every, smooth=smooth, title=title, live=live,
                             logy=logy)
        self._last_eval_step = None

    def _collect_eval(self, cb):
        found = last_eval(cb)
        if not found or found[0] == self._last_eval_step:
            return
        step, results = found
        missing = [m for m in self.metrics if m not in results]
        if missing:
            raise KeyError(f"LiveLossPlot was asked for {missing}, but the evaluation "
                           f"returned only {sorted(results)}.")
        self._last_eval_step = step
        if self.metrics:
            self.plot.add(self._last_eval_step, **{f"val_{m}": results[m] for m in self.metrics})

    def on_train_step_end(self, run_context):
        cb = run_context.original_args()
        self.plot.add(int(cb.cur_step_num), loss=loss_of(cb))
        self._collect_eval(cb)

    def on_train_epoch_end(self, run_context):   # evaluations made at epoch end
        self._collect_eval(run_context.original_args())

    def on_train_end(self, run_context):
        self._collect_eval(run_context.original_args())
        self.plot.show()
