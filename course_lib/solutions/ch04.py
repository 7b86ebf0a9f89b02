"""Chapter 04 reference solutions: an lr-halving callback and an early-stopping callback."""
import mindspore as ms
from mindspore import Tensor, ops
from mindspore.train import Callback


class HalveLR(Callback):
    """After steps every, 2 every, ... (counted from 1), write lr / 2 into the optimizer's
    learning-rate Parameter."""

    def __init__(self, every=1):
        super().__init__()
        self.every = every

    def on_train_step_end(self, run_context):
        cb = run_context.original_args()
        if cb.cur_step_num % self.every == 0:
            lr = cb.optimizer.learning_rate
            ops.assign(lr, Tensor(float(lr.asnumpy()) * 0.5, ms.float32))


class EarlyStop(Callback):
    """Call evaluate() at every epoch end (higher is better); request a stop once the score
    has not beaten the best so far for ``patience`` evaluations in a row."""

    def __init__(self, evaluate, patience=2):
        super().__init__()
        self.evaluate, self.patience = evaluate, patience
        self.best, self.waited = None, 0

    def on_train_epoch_end(self, run_context):
        score = float(self.evaluate())
        if self.best is None or score > self.best:
            self.best, self.waited = score, 0
        else:
            self.waited += 1
            if self.waited >= self.patience:
                run_context.request_stop()


# ---------------------------------------------------------------- realistic wrong solutions
class _EveryStep(Callback):
    def __init__(self, every=1):
        super().__init__()
        self.every = every

    def _due(self, run_context) -> bool:
        return run_context.original_args().cur_step_num % self.every == 0


class wrong_halve_attribute(_EveryStep):
    def on_train_step_end(self, run_context):
        opt = run_context.original_args().optimizer
        if self._due(run_context):
            opt.learning_rate = float(opt.learning_rate.asnumpy()) * 0.5


class wrong_halve_attribute_tensor(_EveryStep):
    """The chapter's pitfall as a Tensor: a new value assigned to the attribute."""

    def on_train_step_end(self, run_context):
        opt = run_context.original_args().optimizer
        if self._due(run_context):
            opt.learning_rate = ms.Tensor(opt.learning_rate.asnumpy() * 0.5, ms.float32)


class wrong_halve_float64(_EveryStep):
    """ops.assign with a float64 value into the float32 learning-rate Parameter."""

    def on_train_step_end(self, run_context):
        lr = run_context.original_args().optimizer.learning_rate
        if self._due(run_context):
            ops.assign(lr, ms.Tensor(lr.asnumpy().astype("float64") * 0.5))


class wrong_halve_at_begin(_EveryStep):
    """Halves as step every, 2 every, ... BEGINS: one step too soon."""

    def on_train_step_begin(self, run_context):
        HalveLR(self.every).on_train_step_end(run_context)


class wrong_halve_from_initial(_EveryStep):
    def on_train_step_end(self, run_context):
        if self._due(run_context):
            lr = run_context.original_args().optimizer.learning_rate
            ops.assign(lr, Tensor(0.1 * 0.5, ms.float32))


class wrong_halve_every_step(_EveryStep):
    """Ignores ``every``: halves after each step."""

    def on_train_step_end(self, run_context):
        HalveLR(1).on_train_step_end(run_context)


class wrong_stop_no_reset(EarlyStop):
    def on_train_epoch_end(self, run_context):
        score = float(self.evaluate())
        if self.best is None or score > self.best:
            self.best = score
        else:
            self.waited += 1
            if self.waited >= self.patience:
                run_context.request_stop()


class wrong_stop_ties_improve(EarlyStop):
    def on_train_epoch_end(self, run_context):
        score = float(self.evaluate())
        if self.best is None or score >= self.best:
            self.best, self.waited = score, 0
        else:
            self.waited += 1
            if self.waited >= self.patience:
                run_context.request_stop()


class wrong_stop_one_late(EarlyStop):
    def on_train_epoch_end(self, run_context):
        score = float(self.evaluate())
        if self.best is None or score > self.best:
            self.best, self.waited = score, 0
        else:
            self.waited += 1
            if self.waited > self.patience:
                run_context.request_stop()
