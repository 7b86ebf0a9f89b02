"""Parallel strategies for training a large model on an Ascend cluster — the code you write.

Five ideas, each answering "what does one device hold?":

* **data parallel**        — every device holds the whole model; the *batch* is split;
                             gradients are averaged with an all-reduce every step.
* **tensor parallel**      — every weight matrix is split (operator-level ``shard``):
                             column-parallel q/k/v/gate/up, row-parallel o/down (Megatron-LM).
* **pipeline parallel**    — the *layers* are split into stages; micro-batches flow through.
* **optimizer parallel**   — MindSpore's name for ZeRO-style sharding: under SEMI_AUTO /
                             AUTO_PARALLEL the weights and the AdamW moments (level1, the
                             default; level2 adds the gradients: parallel/auto_parallel.py
                             454-467) are split across the data-parallel devices; under
                             DATA_PARALLEL (documented for Lamb and AdamWeightDecay, Ascend only)
                             each device updates one group of parameters and broadcasts it.
* **recomputation**        — nothing is split: activations are recomputed in the backward
                             pass instead of being stored (compute traded for memory).

On the CPU build of MindSpore only data parallel (backend mccl) and recomputation run.
Tensor and pipeline parallel need ``SEMI_AUTO_PARALLEL``, which the CPU backend refuses at
graph compile time; optimizer parallel needs it too, or DATA_PARALLEL on Ascend, which the
optimizer refuses on CPU when it is built (MindSpore 2.7 ``context.py`` l.1061-1064 and
``nn/optim/optimizer.py`` l.321-338). ``cpu_refusals()`` runs each one and returns the real
error text.
The functions below *apply* the Ascend configuration to the course model (they only set
attributes and the parallel context, so they also run here — that is how they are tested).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..runtime import run_isolated

# --------------------------------------------------------------------------------------
# The table learners read
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Strategy:
    name: str
    splits: str          # what is divided across devices
    communication: str   # what travels between devices
    mindspore: str       # the switch in MindSpore
    on_cpu: str          # what this CPU build does with it


STRATEGIES = (
    Strategy("data parallel", "the batch (each device: full model)",
             "all-reduce of gradients, every step",
             "set_auto_parallel_context(parallel_mode=DATA_PARALLEL, gradients_mean=True)",
             "runs (mccl backend)"),
    Strategy("tensor parallel", "every weight matrix (column / row)",
             "all-reduce of activations, twice per layer (Megatron's split of q/k/v and MLP)",
             "ops.MatMul(transpose_b=True).shard(((dp, 1), (mp, 1))) under SEMI_AUTO_PARALLEL",
             "refused: semi_auto needs Ascend/GPU (cpu_refusals runs it)"),
    Strategy("pipeline parallel", "the layers (stages)",
             "activations between neighbouring stages",
             "cell.pipeline_stage = s; pipeline_stages=P; nn.PipelineCell(net, micro_batches)",
             "refused: semi_auto needs Ascend/GPU (cpu_refusals runs it)"),
    Strategy("optimizer parallel",
             "SEMI_AUTO: weights + AdamW moments (level2: + grads); DATA_PARALLEL: the update, by parameter group",
             "SEMI_AUTO: reduce-scatter grads, all-gather weights; DATA_PARALLEL: broadcast of the updated groups",
             "enable_parallel_optimizer=True: SEMI_AUTO/AUTO_PARALLEL with any optimizer (Ascend, GPU; "
             "AutoParallel.hsdp()), or DATA_PARALLEL with Lamb/AdamWeightDecay (documented; Ascend only)",
             "refused in both modes: semi_auto needs Ascend/GPU, data parallel needs Ascend "
             "(cpu_refusals runs both)"),
    Strategy("recomputation", "nothing (recompute activations)",
             "none (extra forward compute)",
             "cell.recompute()",
             "runs (graph mode, one device)"),
)


# --------------------------------------------------------------------------------------
# Tensor parallel: Megatron-LM's column / row split of every Linear of a decoder layer
# --------------------------------------------------------------------------------------
# Column-parallel: the OUTPUT features are split (each device computes some heads / some
# FFN channels, no communication). Row-parallel: the INPUT features are split and the
# partial results are summed with one all-reduce. Column then row = 1 all-reduce per block.
COLUMN_PARALLEL = ("W_pack", "q_proj", "k_proj", "v_proj", "gate_proj", "up_proj", "lm_head")
ROW_PARALLEL = ("o_proj", "down_proj")


def tensor_parallel_plan(model) -> dict[str, str]:
    """``{cell name: "column" | "row"}`` for every Dense of the model that tensor parallel splits."""
    from mindspore import nn
    plan = {}
    for name, cell in model.cells_and_names():
        if not isinstance(cell, nn.Dense):
            continue
        leaf = name.rsplit(".", 1)[-1]
        if leaf in COLUMN_PARALLEL:
            plan[name] = "column"
        elif leaf in ROW_PARALLEL:
            plan[name] = "row"
    return plan


def check_tensor_parallel(config, mp: int) -> None:
    """Every device must get whole heads, equal FFN slices and equal vocabulary slices."""
    if not isinstance(mp, int) or mp < 1:
        raise ValueError(f"mp (tensor-parallel size) must be a positive int, got {mp!r}")
    for field in ("num_heads", "intermediate_size", "vocab_size"):
        size = getattr(config, field)
        if size % mp:
            raise ValueError(f"tensor parallel mp={mp} does not divide {field}={size}: each device "
                             f"would get a ragged slice. Choose mp among the divisors of {size}.")


def shard_tensor_parallel(model, dp: int, mp: int) -> dict[str, str]:
    """Set Megatron strategies on every Dense's MatMul (+ BiasAdd). ``nn.Dense`` computes
    x (N, in) @ Wᵀ with W stored (out, in), so the weight's dim 0 is the output features.

    Only effective under SEMI_AUTO_PARALLEL (ignored in other modes). Returns the plan."""
    check_tensor_parallel(model.config, mp)
    if not isinstance(dp, int) or dp < 1:
        raise ValueError(f"dp (data-parallel size) must be a positive int, got {dp!r}")
    plan = tensor_parallel_plan(model)
    cells = dict(model.cells_and_names())
    for name, kind in plan.items():
        dense = cells[name]
        if kind == "column":     # x:(dp,1) W:(mp,1) -> y:(dp,mp)   no communication
            dense.matmul.shard(((dp, 1), (mp, 1)))
            if dense.has_bias:
                dense.bias_add.shard(((dp, mp), (mp,)))
        else:                    # x:(dp,mp) W:(1,mp) -> partial sums, all-reduce over mp
            dense.matmul.shard(((dp, mp), (1, mp)))
            if dense.has_bias:
                dense.bias_add.shard(((dp, 1), (1,)))
    return plan


# --------------------------------------------------------------------------------------
# Pipeline parallel and recomputation
# --------------------------------------------------------------------------------------
def assign_pipeline_stages(model, stages: int) -> list[int]:
    """Spread the decoder layers evenly over ``stages``; embeddings go to the first stage,
    final norm and lm_head to the last. Returns the stage of every layer."""
    layers = model.model.layers
    n = len(layers)
    if not isinstance(stages, int) or not 1 <= stages <= n:
        raise ValueError(f"stages must be an int between 1 and the number of layers ({n}), got {stages!r}")
    per_stage = [n // stages + (1 if s < n % stages else 0) for s in range(stages)]
    stage_of_layer = [s for s, k in enumerate(per_stage) for _ in range(k)]
    model.model.embed_tokens.pipeline_stage = 0
    for layer, s in zip(layers, stage_of_layer):
        layer.pipeline_stage = s
    model.model.norm.pipeline_stage = stages - 1
    model.lm_head.pipeline_stage = stages - 1
    return stage_of_layer


def enable_recompute(model) -> int:
    """Recompute every decoder layer in the backward pass (keep only each layer's input)."""
    for layer in model.model.layers:
        layer.recompute()
    return len(model.model.layers)


# --------------------------------------------------------------------------------------
# The whole Ascend configuration
# --------------------------------------------------------------------------------------
def parallel_context(dp: int, mp: int = 1, pp: int = 1, optimizer_shard: bool = True) -> dict:
    """Keyword arguments of ``ms.set_auto_parallel_context`` for a dp x mp x pp layout."""
    for name, v in (("dp", dp), ("mp", mp), ("pp", pp)):
        if not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    import mindspore as ms
    if mp == 1 and pp == 1 and not optimizer_shard:
        return dict(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True)
    return dict(parallel_mode=ms.ParallelMode.SEMI_AUTO_PARALLEL, device_num=dp * mp * pp,
                pipeline_stages=pp, enable_parallel_optimizer=optimizer_shard,
                dataset_strategy="data_parallel", gradients_mean=True)


def configure_ascend(model, dp: int, mp: int = 1, pp: int = 1, optimizer_shard: bool = True,
                     recompute: bool = True) -> dict:
    """Apply a dp x mp x pp layout to the course model and the global parallel context.

    On Ascend, after ``init()``: wrap the loss in ``nn.PipelineCell(net_with_loss,
    micro_batch_num)`` when pp > 1, then train as usual. Returns the context that was set."""
    import mindspore as ms
    ctx = parallel_context(dp, mp, pp, optimizer_shard)
    ms.set_auto_parallel_context(**ctx)
    if mp > 1 or pp > 1 or optimizer_shard:
        shard_tensor_parallel(model, dp, mp)
    if pp > 1:
        assign_pipeline_stages(model, pp)
    if recompute:
        enable_recompute(model)
    return ctx


# --------------------------------------------------------------------------------------
# What the CPU build says
# --------------------------------------------------------------------------------------
# Each attempt: the strategy's configuration on the tiny Baichuan, then the step where
# MindSpore checks it (compiling one forward; for DATA_PARALLEL's optimizer parallel,
# building the optimizer: MindSpore 2.7 nn/optim/optimizer.py l.321-329 checks the device
# there). Keyword arguments of configure_ascend, or "data_parallel_optimizer".
REFUSAL_ATTEMPTS = {
    "tensor parallel": dict(mp=2, pp=1, optimizer_shard=False),
    "pipeline parallel": dict(mp=1, pp=2, optimizer_shard=False),
    "optimizer parallel, SEMI_AUTO_PARALLEL": dict(mp=1, pp=1, optimizer_shard=True),
    "optimizer parallel, DATA_PARALLEL": "data_parallel_optimizer",
}


def _attempt(how) -> str:
    """One attempt in this process; the first line of MindSpore's error, or a note."""
    import numpy as np
    import mindspore as ms
    from mindspore import nn
    from ..baichuan import BaichuanForCausalLM, tiny
    ms.reset_auto_parallel_context()
    model = BaichuanForCausalLM(tiny(num_layers=2, hidden_size=64, intermediate_size=128))
    try:
        if how == "data_parallel_optimizer":
            ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL,
                                         gradients_mean=True, enable_parallel_optimizer=True)
            nn.AdamWeightDecay(model.trainable_params(), learning_rate=1e-3)
        else:
            configure_ascend(model, dp=1, recompute=False, **how)
            model(ms.Tensor(np.zeros((2, 8), np.int32)))
    except RuntimeError as e:
        return next((line for line in str(e).splitlines() if line.strip()), str(e))
    finally:
        ms.reset_auto_parallel_context()
    return "this build accepted it"


def _refusal_demo(names: list) -> dict:
    """Fresh process (the parallel context is global): each named attempt in turn."""
    import course_lib as cl
    cl.setup(device="CPU", mode="graph", seed=0, quiet=True)
    return {name: _attempt(REFUSAL_ATTEMPTS[name]) for name in names}


def cpu_refusals(names=None, timeout: float = 300) -> dict:
    """``{attempt: first line of MindSpore's error}`` for every attempt of
    ``REFUSAL_ATTEMPTS`` (or the ``names`` given), run in a fresh process and a scratch
    working directory (a failed compile leaves its IR dumps there). "this build accepted
    it" where MindSpore raised nothing."""
    import tempfile
    names = list(REFUSAL_ATTEMPTS) if names is None else list(names)
    unknown = [n for n in names if n not in REFUSAL_ATTEMPTS]
    if unknown:
        raise ValueError(f"Unknown attempts {unknown}; choose among {list(REFUSAL_ATTEMPTS)}.")
    with tempfile.TemporaryDirectory(prefix="course-refusal-") as scratch:
        return run_isolated(_refusal_demo, timeout=timeout, cwd=scratch, names=names)


def cpu_refusal(timeout: float = 180) -> str:
    """The tensor-parallel attempt alone (``cpu_refusals``): the first line of MindSpore's
    error, or a note if it compiled."""
    return cpu_refusals(["tensor parallel"], timeout)["tensor parallel"]
