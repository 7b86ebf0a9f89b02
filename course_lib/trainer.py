"""``LLMTrainer``: one object that owns a causal LM, its optimizer, data and callbacks.

    trainer = LLMTrainer(model, train_ds, eval_ds, lr=3e-3, steps=300, warmup_steps=30,
                         weight_decay=0.1, clip=1.0, callbacks=[ProgressBar()])
    history = trainer.train()                 # {'step': [...], 'loss': [...], 'lr': [...], ...}
    trainer.evaluate()                        # {'loss': 4.1, 'perplexity': 60.3}
    trainer.save(path); trainer.load(path)    # weights + optimizer state + step + data position
    trainer.finetune(sft_ds, trainable=lambda n: "lora" in n, steps=100, lr=1e-3)
    trainer.generate(tok, "人民日报", max_new_tokens=40, do_sample=True, top_k=20)

Why a custom train step (``course_lib.training.TrainStep``) rather than ``Model.train``:
``Model`` counts in epochs and gives no hook between gradient and update, while an LLM run
is counted in optimizer steps, needs global-norm clipping (and its pre-clip norm for the
log), a token-masked loss over ``(input_ids, labels)`` batches, a resumable position
inside the data, and an optimizer over a chosen subset of parameters. The step is still an
``nn.Cell``: in GRAPH mode it compiles as a whole, like ``Model``'s train network.
MindSpore ``Callback`` objects work with both (the trainer fills the same ``RunContext``
fields ``Model.train`` does: ``cur_step_num``, ``net_outputs``, ``optimizer``, ...).

Interrupt (Jupyter's Stop button, Ctrl-C) raises ``KeyboardInterrupt`` and keeps the
kernel: a step (batch + compiled update + counters) finishes before the interrupt is
raised, progress bars close, and ``train()`` continues with the next step and batch.

Data = a ``mindspore.dataset`` yielding ``(input_ids, labels)`` as ``course_lib.pipelines``
builds it. The trainer draws batches endlessly (epoch after epoch, re-shuffled); it
remembers how many it consumed, so ``load`` + ``train`` continues in the same data order.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Sequence

import mindspore as ms
import mindspore.dataset as ds
import numpy as np
from mindspore import Tensor, nn
from mindspore.train import RunContext

from .hf_weights import check_compatible
from .runtime import defer_interrupt, eval_mode, execution_mode, keep_interrupt
from .safeio import save_checkpoint_atomic
from .validate import (check_batch, check_learning_rate, check_token_ids, is_int,
                       model_vocab_size)
from .blocks import count_parameters
from .training import (AdamW, EvalCell, LossCell, TrainStep, apply_amp, select_trainable,
                       warmup_cosine_lr)

CHECKPOINT_FORMAT = "course_lib.LLMTrainer/1"
_META_KEYS = ("format", "step", "total_steps", "batches_consumed", "data_seed", "history")


def _as_int(value) -> int:
    """append_dict ints come back from load_checkpoint as 0-d Parameters."""
    return int(np.asarray(value.asnumpy() if hasattr(value, "asnumpy") else value))


class CallbackParams(dict):
    """What ``run_context.original_args()`` returns: a dict readable as attributes, like
    MindSpore's internal one (``cb.cur_step_num`` or ``cb["cur_step_num"]``)."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError as err:
            raise AttributeError(name) from err

    def __setattr__(self, name, value):
        self[name] = value


def _dataset_size(data, what: str) -> int:
    if data is None:
        raise ValueError(f"{what} is None: pass a mindspore dataset yielding (input_ids, labels), "
                         "e.g. course_lib.pipelines.lm_dataset(...).")
    if not hasattr(data, "create_tuple_iterator"):
        raise TypeError(f"{what} must be a mindspore dataset (from course_lib.pipelines), "
                        f"got {type(data).__name__}.")
    size = data.get_dataset_size()
    if not size:
        raise ValueError(f"{what} is empty (0 batches): add data or lower the batch size "
                         "(batches with drop_remainder=True need at least batch_size examples).")
    columns = data.get_col_names()
    if len(columns) != 2:
        raise ValueError(f"{what} must yield exactly two columns (input_ids, labels), got "
                         f"{columns}.")
    return size


class LLMTrainer:
    """Train, evaluate, fine-tune, sample from and checkpoint a causal LM.

    ``model(input_ids) -> logits (B, T, V)``. Keyword arguments:

    * ``lr``, ``steps``, ``warmup_steps`` (default 10 % of ``steps``), ``min_lr`` (default
      ``lr / 10``): the warm-up + cosine schedule, one entry per optimizer step;
    * ``weight_decay`` (decoupled, matrices only), ``betas``, ``eps``: AdamW;
    * ``clip``: global gradient-norm limit (``None``/0 = off);
    * ``amp_level``: ``"O0"`` float32 or ``"O1"``-``"O3"`` float16 (no dynamic loss scaling
      on CPU; ``loss_scale`` is a fixed factor);
    * ``trainable``: ``None`` = all trainable parameters, a name filter or a Parameter list;
    * ``mode``: ``"graph"`` (compiled step, fast) or ``"pynative"`` (eager, debuggable);
    * ``eval_batches``: cap on evaluation batches (``None`` = the whole eval set);
    * ``data_seed``: shuffle seed of the training data order (default: the dataset
      config seed at construction, i.e. the ``seed`` given to ``make_dataset``).
    """

    def __init__(self, model: nn.Cell, train_data, eval_data=None, *, lr: float = 1e-3,
                 steps: int = 100, warmup_steps: int | None = None, weight_decay: float = 0.1,
                 clip: float | None = 1.0, amp_level: str = "O0", callbacks: Sequence = (),
                 trainable=None, mode: str = "graph", min_lr: float | None = None,
                 betas: tuple[float, float] = (0.9, 0.95), eps: float = 1e-8,
                 loss_scale: float = 1.0, eval_batches: int | None = None,
                 data_seed: int | None = None):
        if mode not in ("graph", "pynative"):
            raise ValueError(f"Unknown mode {mode!r}; use 'graph' or 'pynative'.")
        keep_interrupt()       # Jupyter's Interrupt -> KeyboardInterrupt, not a dead kernel
        self.vocab_size = model_vocab_size(model)
        self.model = apply_amp(model, amp_level)
        self.amp_level = amp_level
        self.mode = mode
        self.callbacks = list(callbacks)
        self.eval_data = eval_data
        self.eval_batches = eval_batches
        self.betas, self.eps, self.loss_scale = betas, eps, loss_scale
        self.data_seed = ds.config.get_seed() if data_seed is None else int(data_seed)
        self._eval_cell = EvalCell(self.model)
        self._configure(train_data, trainable=trainable, lr=lr, steps=steps,
                        warmup_steps=warmup_steps, min_lr=min_lr, weight_decay=weight_decay,
                        clip=clip)

    # ------------------------------------------------------------------ set-up
    def _configure(self, train_data, *, trainable, lr, steps, warmup_steps, min_lr,
                   weight_decay, clip):
        """(Re)build data position, schedule, optimizer and train step for one phase
        (pre-training, or a fine-tuning phase started by :meth:`finetune`)."""
        if not is_int(steps) or steps <= 0:
            raise ValueError(f"steps must be a positive int (optimizer steps), got {steps!r}")
        check_learning_rate(lr)
        self.batches_per_epoch = _dataset_size(train_data, "train_data")
        self.train_data = train_data
        if warmup_steps is None:
            warmup_steps = max(1, steps // 10)
        min_lr = lr / 10 if min_lr is None else min_lr
        self.total_steps = int(steps)
        self.lr_schedule = warmup_cosine_lr(lr, self.total_steps, warmup_steps, min_lr)
        self.hparams = dict(lr=lr, steps=int(steps), warmup_steps=warmup_steps, min_lr=min_lr,
                            weight_decay=weight_decay, clip=clip, amp_level=self.amp_level,
                            mode=self.mode)
        self.params = select_trainable(self.model, trainable)
        self.optimizer = AdamW(self.params, self.lr_schedule, beta1=self.betas[0],
                               beta2=self.betas[1], eps=self.eps, weight_decay=weight_decay)
        self.train_step = TrainStep(LossCell(self.model), self.optimizer, clip=clip,
                                    loss_scale=self.loss_scale)
        self.step = 0                  # optimizer steps done in this phase
        self.batches_consumed = 0      # position in the training data stream
        self.history = {"step": [], "loss": [], "lr": [], "grad_norm": []}
        self.stopped_early = self.interrupted = False
        self._iterator = None

    @property
    def num_trainable(self) -> int:
        return count_parameters(self.params)

    # ------------------------------------------------------------------ data
    def _open_iterator(self):
        """A fresh endless iterator in the run's shuffle order, fast-forwarded to where the
        run stopped: the shuffle seed is read when the iterator is created, so it is set
        right here (and restored afterwards) to make the order independent of any other
        seeding in between."""
        previous = ds.config.get_seed()
        ds.config.set_seed(self.data_seed)
        try:
            self._iterator = self.train_data.create_tuple_iterator(num_epochs=-1)
        finally:
            ds.config.set_seed(previous)
        for _ in range(self.batches_consumed):
            self._pull()

    def _pull(self):
        try:
            return next(self._iterator)
        except StopIteration:           # end of an epoch: the same iterator goes on
            return next(self._iterator)

    def _next_batch(self):
        if self._iterator is None:
            self._open_iterator()
        batch = self._pull()
        self.batches_consumed += 1
        if self.vocab_size is not None:
            try:
                check_batch(*batch, self.vocab_size)
            except (TypeError, ValueError) as err:
                number = self.batches_consumed
                self.batches_consumed -= 1
                self._iterator = None      # reopened at the same position next time
                raise type(err)(f"Training batch {number}: {err}") from None
        return batch

    def _run_step(self):
        """Draw a batch and take one optimizer step as ONE unit: a KeyboardInterrupt that
        arrives meanwhile is held until the step and its counters are done, so that
        ``self.step``, the optimizer's step and the data position always agree."""
        with defer_interrupt():
            input_ids, labels = self._next_batch()
            lr = self.lr_schedule[self.step]
            loss, grad_norm = self.train_step(input_ids, labels)
            loss_value, norm = float(loss.asnumpy()), float(grad_norm.asnumpy())
            self.step += 1
            if math.isfinite(loss_value):
                for key, value in (("step", self.step), ("loss", loss_value), ("lr", lr),
                                   ("grad_norm", norm)):
                    self.history[key].append(value)
        if not math.isfinite(loss_value):
            raise FloatingPointError(
                f"Loss became {loss_value} at step {self.step}: lower lr, keep clip on, "
                "or use amp_level='O0' (float16 overflows more easily).")
        return loss, loss_value, lr

    # ------------------------------------------------------------------ callbacks
    def _callback_params(self, steps_this_call: int) -> CallbackParams:
        return CallbackParams(
            trainer=self, network=self.train_step, train_network=self.train_step,
            model=self.model, optimizer=self.optimizer, train_dataset=self.train_data,
            batch_num=self.batches_per_epoch,
            epoch_num=math.ceil(self.total_steps / self.batches_per_epoch),
            cur_step_num=self.step, cur_epoch_num=self.batches_consumed // self.batches_per_epoch + 1,
            total_steps=self.total_steps, steps_this_call=steps_this_call,
            net_outputs=None, loss=None, lr=None, grad_norm=None, mode="train", interrupted=False,
            dataset_sink_mode=False, history=self.history)

    def _fire(self, event: str, run_context: RunContext):
        for cb in self.callbacks:
            getattr(cb, event)(run_context)

    # ------------------------------------------------------------------ training
    def train(self, steps: int | None = None) -> dict:
        """Run ``steps`` more optimizer steps (default: the rest of the schedule) and return
        this call's history (``self.history`` keeps the whole run)."""
        remaining = self.total_steps - self.step
        n = remaining if steps is None else steps
        if not is_int(n) or n <= 0:
            if steps is None:
                raise ValueError(f"All {self.total_steps} scheduled steps are done; build a "
                                 "trainer with more steps (or call finetune) to go on.")
            raise ValueError(f"steps must be a positive int, got {steps!r}")
        if n > remaining:
            raise ValueError(f"{n} more step{'' if n == 1 else 's'} would exceed the schedule of "
                             f"{self.total_steps} steps ({self.step} done); build the trainer "
                             f"with steps >= {self.step + n}.")
        start = len(self.history["step"])
        cb = self._callback_params(n)
        run_context = RunContext(cb)
        self.stopped_early = self.interrupted = False
        self.model.set_train(True)
        with execution_mode(self.mode):
            self._fire("on_train_begin", run_context)
            try:
                self._loop(n, cb, run_context)
            except KeyboardInterrupt:
                self.interrupted = cb.interrupted = True   # on_train_end: the run is not over
                print(f"\nInterrupted after step {self.step}/{self.total_steps} "
                      f"({self.batches_consumed} batches drawn). Counters are consistent: "
                      "trainer.train() continues with the next step and the next batch "
                      "(nothing skipped, nothing repeated).")
                raise
            finally:   # progress bars close, plots draw, whatever stopped the loop
                self._fire("on_train_end", run_context)
        return {k: v[start:] for k, v in self.history.items()}

    def _loop(self, n: int, cb, run_context) -> None:
        for _ in range(n):
            if self.batches_consumed % self.batches_per_epoch == 0:
                cb.cur_epoch_num = self.batches_consumed // self.batches_per_epoch + 1
                self._fire("on_train_epoch_begin", run_context)
            cb.cur_step_num = self.step + 1     # as in Model.train: the step about to run
            self._fire("on_train_step_begin", run_context)
            loss, loss_value, lr = self._run_step()
            cb.update(cur_step_num=self.step, net_outputs=loss, loss=loss_value, lr=lr,
                      grad_norm=self.history["grad_norm"][-1])
            self._fire("on_train_step_end", run_context)
            if self.batches_consumed % self.batches_per_epoch == 0:
                self._fire("on_train_epoch_end", run_context)
            if run_context.get_stop_requested():
                self.stopped_early = True
                break

    def evaluate(self, data=None, max_batches: int | None = None) -> dict:
        """Token-weighted mean loss and perplexity = exp(loss) over ``data`` (default: the
        trainer's eval data), capped at ``max_batches`` (default ``eval_batches``)."""
        data = self.eval_data if data is None else data
        if data is None:
            raise ValueError("No evaluation data: pass eval_data to LLMTrainer or "
                             "data= to evaluate().")
        _dataset_size(data, "eval data")
        limit = self.eval_batches if max_batches is None else max_batches
        total, count = 0.0, 0.0
        with eval_mode(self.model), execution_mode(self.mode):
            for i, (input_ids, labels) in enumerate(data.create_tuple_iterator(num_epochs=1)):
                if limit is not None and i >= limit:
                    break
                if self.vocab_size is not None:
                    check_batch(input_ids, labels, self.vocab_size)
                nll, n = self._eval_cell(input_ids, labels)
                total += float(nll.asnumpy())
                count += float(n.asnumpy())
        if count == 0:
            raise ValueError("The evaluation data has no target tokens (all labels ignored).")
        loss = total / count
        return {"loss": loss, "perplexity": math.exp(min(loss, 700.0))}

    def finetune(self, data, trainable=None, steps: int = 100, lr: float = 1e-4, *,
                 warmup_steps: int = 0, weight_decay: float = 0.0, min_lr: float | None = None,
                 clip: float | None = 1.0, eval_data=None, callbacks: Sequence | None = None
                 ) -> dict:
        """Start a new phase on ``data``: fresh optimizer and schedule over ``trainable``
        only (a name filter ``callable(name) -> bool`` or a list of Parameters); every other
        weight stays bit-identical. ``eval_data``/``callbacks``, when given, replace the
        trainer's for this and later calls (step counts restart at 1: a plot of the previous
        phase should not continue). Returns the phase's history."""
        if eval_data is not None:
            self.eval_data = eval_data
        if callbacks is not None:
            self.callbacks = list(callbacks)
        self._configure(data, trainable=trainable, lr=lr, steps=steps,
                        warmup_steps=warmup_steps, min_lr=lr if min_lr is None else min_lr,
                        weight_decay=weight_decay, clip=clip)
        return self.train()

    # ------------------------------------------------------------------ inference
    def generate(self, tokenizer, prompt: str, max_new_tokens: int = 50, **sampling) -> str:
        """Prompt + continuation as text (``course_lib.generation.generate_text``; sampling
        keywords such as ``do_sample``, ``temperature``, ``top_k``, ``top_p``, ``seed``)."""
        from .generation import generate_text   # the model chapter's decoding loop
        with eval_mode(self.model):
            return generate_text(self.model, tokenizer, [prompt], max_new_tokens, **sampling)[0]

    def predict(self, input_ids) -> np.ndarray:
        """Logits (B, T, V) as NumPy for int token ids (B, T)."""
        if self.vocab_size is not None:
            check_token_ids(input_ids, self.vocab_size, "input_ids")
        ids = Tensor(np.asarray(input_ids, np.int32))
        with eval_mode(self.model):
            return self.model(ids).asnumpy()

    # ------------------------------------------------------------------ checkpoints
    def save(self, path) -> Path:
        """Weights, optimizer state (moments, step counter, schedule) and the run position
        (step, batches consumed, data seed, history) in one ``.ckpt`` file."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        meta = {"format": CHECKPOINT_FORMAT, "step": self.step, "total_steps": self.total_steps,
                "batches_consumed": self.batches_consumed, "data_seed": self.data_seed,
                "history": json.dumps(self.history)}
        return save_checkpoint_atomic(self.train_step, path, append_dict=meta)

    def load(self, path, weights_only: bool = False) -> "LLMTrainer":
        """Restore a :meth:`save` checkpoint. ``weights_only=True`` loads the model weights
        only (e.g. start fine-tuning from a pre-trained run) and keeps this trainer's
        optimizer state and position. Mismatched models fail with the parameter names."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"No checkpoint at {path}: train and trainer.save(path) first.")
        try:
            saved = ms.load_checkpoint(str(path))
        except Exception as err:  # MindSpore raises ValueError/RuntimeError on bad files
            raise ValueError(f"Cannot read checkpoint {path}: the file is corrupt or not a "
                             f"MindSpore checkpoint ({type(err).__name__}: {err}).") from err
        meta = {k: saved.pop(k) for k in _META_KEYS if k in saved}
        model_names = {p.name for p in self.model.get_parameters()}
        target = self.model if weights_only else self.train_step
        expected = {p.name: tuple(p.shape) for p in target.get_parameters()}
        if weights_only:   # drop optimizer state (ours or another optimizer's)
            optimizer_names = {p.name for p in self.train_step.get_parameters()} - model_names
            saved = {k: v for k, v in saved.items() if k not in optimizer_names
                     and not k.startswith(("adam_m.", "adam_v.", "moment"))}
        check_compatible({k: v for k, v in expected.items() if k != "learning_rate"},
                         {k: v for k, v in saved.items() if k != "learning_rate"},
                         source=str(path), target="this trainer's model"
                         + ("" if weights_only else " + optimizer"), model_names=model_names,
                         extra_state_hint="The weights fit; only the optimizer state differs "
                         "(saved with another trainable selection?). Use load(path, "
                         "weights_only=True).", shape_hint="it was saved from a model with "
                         "another configuration (hidden size, vocab, FFN width...): build the "
                         "trainer's model with the config it was saved with")
        if not weights_only:
            if "format" not in meta:
                raise ValueError(f"{path} has no trainer state (not written by LLMTrainer.save); "
                                 "use load(path, weights_only=True) to load its weights.")
            ours = np.asarray(self.lr_schedule, np.float32)
            theirs = saved["learning_rate"].asnumpy() if "learning_rate" in saved else ours
            if theirs.shape != ours.shape or not np.allclose(theirs, ours, rtol=1e-6, atol=0):
                raise ValueError(f"{path} was trained with another learning-rate schedule "
                                 f"({theirs.size} steps); build the trainer with the same lr, "
                                 "steps, warmup_steps and min_lr to resume it, or load "
                                 "weights_only=True.")
        not_loaded, _ = ms.load_param_into_net(target, saved, strict_load=True)
        if not_loaded:
            raise ValueError(f"Checkpoint {path} did not set {not_loaded[:5]}.")
        if not weights_only:
            self.step = _as_int(meta["step"])
            self.batches_consumed = _as_int(meta["batches_consumed"])
            self.data_seed = _as_int(meta["data_seed"])
            self.history = json.loads(str(meta["history"]))
            self._iterator = None   # reopened (and fast-forwarded) by the next train()
        return self

    def __repr__(self):
        return (f"LLMTrainer(step {self.step}/{self.total_steps}, trainable "
                f"{self.num_trainable:,} params, mode={self.mode}, amp={self.amp_level})")
