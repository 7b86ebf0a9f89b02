"""Parallel strategies for training a large model on an Ascend cluster — the code you write.

Five ideas, each answering "what does one device hold?":

* **data parallel**        — every device holds the whole model; the *batch* is split;
                             gradients are averaged with an all-reduce every step.
* **tensor parallel**      — every weight matrix is split (operator-level ``shard``):
                             column-parallel q/k/v/gate/up, row-parallel o/down (Megatron-LM).
* **pipeline parallel**    — the *layers* are split into stages; micro-batches flow through.
* **optimizer sharding**   — ZeRO: the AdamW moments (and, at higher levels, gradients and
                             weights) are split across the data-parallel devices.
* **recomputation**        — nothing is split: activations are recomputed in the backward
                             pass instead of being stored (compute traded for memory).

On the CPU build of MindSpore only data parallel (backend mccl) and recomputation run.
Tensor/pipeline parallel and optimizer sharding need ``SEMI_AUTO_PARALLEL``, which the CPU
backend refuses at graph compile time; ``cpu_refusal()`` shows the real error text.
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
             "all-reduce of activations, twice per layer",
             "ops.MatMul().shard(((dp, 1), (mp, 1))) under SEMI_AUTO_PARALLEL",
             "refused: semi_auto needs Ascend/GPU"),
    Strategy("pipeline parallel", "the layers (stages)",
             "activations between neighbouring stages",
             "cell.pipeline_stage = s; pipeline_stages=P; nn.PipelineCell(net, micro_batches)",
             "refused: semi_auto needs Ascend/GPU"),
    Strategy("optimizer sharding", "AdamW moments (+ grads, weights)",
             "reduce-scatter grads, all-gather weights",
             "enable_parallel_optimizer=True (AutoParallel.hsdp())",
             "refused: semi_auto needs Ascend/GPU"),
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
def _refusal_demo() -> str:
    """Fresh process: configure tensor parallel on the tiny Baichuan, compile one forward."""
    import numpy as np
    import course_lib as cl
    import mindspore as ms
    from ..baichuan import BaichuanForCausalLM, tiny
    cl.setup(device="CPU", mode="graph", seed=0, quiet=True)
    model = BaichuanForCausalLM(tiny(num_layers=2, hidden_size=64, intermediate_size=128))
    configure_ascend(model, dp=1, mp=2, pp=1, optimizer_shard=False, recompute=False)
    try:
        model(ms.Tensor(np.zeros((2, 8), np.int32)))
    except RuntimeError as e:
        return next((line for line in str(e).splitlines() if line.strip()), str(e))
    return "this build accepted SEMI_AUTO_PARALLEL"


def cpu_refusal(timeout: float = 180) -> str:
    """Run the tensor-parallel configuration in a fresh process (the parallel context is
    global) and return the first line of MindSpore's error — or a note if it compiled."""
    return run_isolated(_refusal_demo, timeout=timeout)
