"""Data-parallel pre-training of the course's tiny Baichuan — one script for 2 CPU processes
or 8 Ascend NPUs per node.

    # 2 processes on this CPU (mccl backend)
    msrun --worker_num=2 --local_worker_num=2 --master_port=8118 --log_dir=msrun_log --join=True \\
          python -m course_lib.distributed.train_dp --steps 50 --out runs/dp

    # one Ascend node with 8 NPUs (HCCL backend): the same script, more workers
    msrun --worker_num=8 --local_worker_num=8 --master_port=8118 --log_dir=msrun_log --join=True \\
          python -m course_lib.distributed.train_dp --device Ascend --steps 2000 --out runs/dp

What makes it data parallel (everything else is ordinary single-device training):

1. ``init()`` joins the cluster msrun started; ``get_rank()``/``get_group_size()`` say who we are.
2. ``set_auto_parallel_context(parallel_mode=DATA_PARALLEL, gradients_mean=True)``.
3. The corpus is **sharded by rank** (``num_shards=world, shard_id=rank``): each process
   sees a different part of every epoch, so N processes cover the data N times faster.
4. The gradients are **all-reduced (averaged)** before clipping and the update
   (``DataParallelTrainStep``): every rank applies the same update, so the weights stay
   identical. ``--no-parallel`` skips 2 and 4 — then every rank trains its own model.
5. Only rank 0 logs progress and writes the checkpoint.

Every rank also saves its final weights as ``weights_rank<r>.npz`` in ``--out``: that is
how the notebook *proves* the all-reduce happened (identical weights on every rank).
Run without msrun it trains on one process (world size 1) — handy for debugging.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
from pathlib import Path

import numpy as np
from mindspore import nn, ops

from ..hf_weights import state_dict
from ..layers import swiglu_width
from ..training import AdamW, LossCell, TrainStep, global_norm, warmup_cosine_lr
from .launch import emit


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default=None, help="CPU / GPU / Ascend (default: best available)")
    p.add_argument("--mode", default="graph", choices=("graph", "pynative"))
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--batch-size", type=int, default=8, help="per rank (global = x world size)")
    p.add_argument("--block-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--warmup", type=int, default=None, help="warm-up steps (default: steps // 10)")
    p.add_argument("--clip", type=float, default=1.0)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--data", default=None,
                   help="packed token blocks (.npy from prepare_blocks); default: build from the news corpus")
    p.add_argument("--max-docs", type=int, default=None, help="use only the first N training documents")
    p.add_argument("--out", default=None, help="directory for the checkpoint and per-rank weights")
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None,
                   help="CPU threads per process (default: MindSpore's choice)")
    p.add_argument("--blocking", action="store_true",
                   help="synchronous PyNative op dispatch (ms.runtime.launch_blocking): much "
                        "faster for small models on a busy CPU")
    p.add_argument("--no-parallel", action="store_true",
                   help="skip the DATA_PARALLEL context and the gradient all-reduce (ranks diverge)")
    args = p.parse_args(argv)
    for name in ("steps", "batch_size", "block_size", "hidden", "layers", "heads", "log_every"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    return args


# --------------------------------------------------------------------------------------
# Data: prepared once, sharded by rank
# --------------------------------------------------------------------------------------
def prepare_blocks(block_size: int = 64, max_docs: int | None = None, path=None) -> np.ndarray:
    """Tokenize the news training split and pack it into rows of ``block_size + 1`` ids.

    Preprocess once before launching (pass ``path`` to save ``.npy``): N workers then load
    the same file instead of each tokenizing the corpus again."""
    from ..data import news_splits
    from ..pipelines import pack_blocks
    from ..tokenizer import load_tokenizer
    tok = load_tokenizer()
    docs = news_splits().train[:max_docs]
    blocks = pack_blocks(tok.encode_batch(docs), block_size, tok.eos_id)
    if path is not None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp.npy")
        np.save(tmp, blocks)
        tmp.replace(path)
    return blocks


def sharded_dataset(blocks: np.ndarray, batch_size: int, rank: int, world: int, seed: int):
    """Same shuffle on every rank (same seed), then rank r keeps every world-th sample."""
    from ..pipelines import BlockSource, make_dataset
    return make_dataset(BlockSource(blocks), batch_size, shuffle=True, seed=seed,
                        num_shards=world if world > 1 else None,
                        shard_id=rank if world > 1 else None)


# --------------------------------------------------------------------------------------
# The train step with the all-reduce
# --------------------------------------------------------------------------------------
class DataParallelTrainStep(TrainStep):
    """TrainStep's step with the gradients averaged over all ranks BEFORE their norm is
    measured and they are clipped (``ops.clip_by_global_norm``; no loss scaling), so the
    update is the global-norm clip of the mean gradient, as one device would compute it on
    the whole batch. (Clipping each rank's own
    gradient first and averaging after still gives every rank the same update, but a
    different one, which depends on how the batch was split.)"""

    def __init__(self, loss_net, optimizer, clip):
        super().__init__(loss_net, optimizer, clip)
        self.grad_reducer = nn.DistributedGradReducer(optimizer.parameters, mean=True)

    def construct(self, input_ids, labels):
        loss = self.loss_net(input_ids, labels)
        sens = ops.fill(loss.dtype, loss.shape, 1.0)
        grads = self.grad(self.loss_net, self.weights)(input_ids, labels, sens)
        grads = self.grad_reducer(grads)                 # all-reduce (mean) across ranks
        norm = global_norm(grads)
        if self.clip > 0.0:
            grads = ops.clip_by_global_norm(grads, self.clip)
        loss = ops.depend(loss, self.optimizer(grads))
        return loss, norm


def build_train_step(model, lr_schedule, clip: float, parallel: bool):
    """``TrainStep`` (course_lib.training) + a gradient all-reduce when ``parallel``."""
    optimizer = AdamW(model.trainable_params(), lr_schedule, weight_decay=0.1)
    cls = DataParallelTrainStep if parallel else TrainStep
    return cls(LossCell(model), optimizer, clip)


def model_config(args):
    """The course's tiny Baichuan (ALiBi, W_pack, SwiGLU), resized by the command line."""
    from ..baichuan import tiny
    return tiny(hidden_size=args.hidden, num_layers=args.layers, num_heads=args.heads,
                intermediate_size=swiglu_width(args.hidden),
                max_seq_len=max(args.block_size, 512))


def fingerprint(weights: dict[str, np.ndarray]) -> float:
    """One number that differs when the weights differ (sum of |w| over all parameters)."""
    return float(sum(np.abs(w.astype(np.float64)).sum() for w in weights.values()))


def digest(weights: dict[str, np.ndarray]) -> str:
    """SHA-256 of every parameter's name, shape, dtype and bytes (in name order): equal
    digests mean bit-identical weights, which a sum like ``fingerprint`` cannot promise."""
    h = hashlib.sha256()
    for name in sorted(weights):
        w = np.ascontiguousarray(weights[name])
        h.update(f"{name}|{w.shape}|{w.dtype}|".encode())
        h.update(w.tobytes())
    return h.hexdigest()


# --------------------------------------------------------------------------------------
# Driving it from a notebook / a test
# --------------------------------------------------------------------------------------
def script_args(**options) -> list[str]:
    """``steps=5, no_parallel=True`` -> ``["--steps", "5", "--no-parallel"]``."""
    args = []
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            args.append(flag)
        elif value not in (False, None):
            args += [flag, str(value)]
    return args


def blocks_file(out_dir, **options) -> Path:
    """Where ``launch`` keeps the packed corpus for these ``options`` (one file per block size
    and document count, so runs at other scales in the same folder never mix)."""
    block_size, max_docs = options.get("block_size", 64), options.get("max_docs")
    return Path(out_dir) / f"blocks_{block_size}_{'all' if max_docs is None else max_docs}.npy"


def launch(out_dir, workers: int = 2, timeout: float = 300, **options):
    """Prepare the data once, run this script under msrun on ``workers`` processes with
    ``options`` (``steps=5, no_parallel=True, ...``), return the ``MsrunResult``.
    Logs go to ``out_dir/logs``, weights and checkpoint to ``out_dir``."""
    from .launch import run_msrun
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob("weights_rank*.npz"):
        old.unlink()                      # never compare against a previous run's weights
    data = blocks_file(out_dir, **options)
    if not data.exists():
        prepare_blocks(options.get("block_size", 64), options.get("max_docs"), data)
    options = {**options, "data": data, "out": out_dir}
    target = ["python", "-m", "course_lib.distributed.train_dp",
              *script_args(**options)]
    return run_msrun(target, workers, log_dir=out_dir / "logs", timeout=timeout)


def first_step_norms(out_dir, world: int = 2, **options) -> dict[str, float]:
    """Recompute here, in one process without msrun, what rank 0 of a finished run
    (``out_dir``, same ``options``) should have logged at step 1: the gradient norm over
    every rank's first batch together (what the mean all-reduce gives) and over rank 0's
    batch alone (what training without it gives), plus the initial weights' fingerprint
    and rank 0's first-batch sum, to compare with the run's ``start`` record."""
    import mindspore as ms
    from mindspore import Tensor
    import course_lib as cl
    from ..baichuan import BaichuanForCausalLM
    args = parse_args(script_args(**options))
    blocks = np.load(blocks_file(out_dir, **options))
    firsts = [next(sharded_dataset(blocks, args.batch_size, rank, world, args.seed)
                   .create_tuple_iterator(num_epochs=1, output_numpy=True))
              for rank in range(world)]
    cl.seed_everything(args.seed)             # as main() does before building the model
    model = BaichuanForCausalLM(model_config(args))
    grad_fn = ms.value_and_grad(LossCell(model), None, model.trainable_params())

    def norm(batches) -> float:
        ids, labels = (Tensor(np.concatenate([b[i] for b in batches])) for i in (0, 1))
        return float(global_norm(grad_fn(ids, labels)[1]).asnumpy())

    return dict(all_ranks=norm(firsts), rank0_alone=norm(firsts[:1]),
                init_fingerprint=fingerprint(state_dict(model)),
                first_batch_sum=int(firsts[0][0].sum()))


def load_rank_weights(out_dir) -> dict[int, dict[str, np.ndarray]]:
    """``{rank: {name: array}}`` from the ``weights_rank<r>.npz`` files of a run."""
    found = {}
    for path in sorted(Path(out_dir).glob("weights_rank*.npz")):
        with np.load(path) as f:
            found[int(path.stem.removeprefix("weights_rank"))] = {k: f[k] for k in f.files}
    if not found:
        raise FileNotFoundError(f"No weights_rank*.npz in {out_dir}: did the run finish? "
                                "(run it with --out pointing there)")
    return found


def max_rank_difference(out_dir) -> float:
    """Largest |w_rank_i - w_rank_0| over every parameter and rank: 0.0 means identical."""
    ranks = load_rank_weights(out_dir)
    ref = ranks[min(ranks)]
    worst = 0.0
    for weights in ranks.values():
        if weights.keys() != ref.keys():
            raise ValueError("The ranks saved different parameter sets; were they the same model?")
        for name, w in weights.items():
            worst = max(worst, float(np.abs(w.astype(np.float64) - ref[name]).max()))
    return worst


# --------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------
def _join_cluster(args):
    """Device and mode first (init() binds the communication backend of this device), then
    the cluster when msrun started us. Returns ``(rank, world, parallel)``."""
    import mindspore as ms
    import course_lib as cl
    cl.setup(device=args.device, mode=args.mode, seed=args.seed, quiet=True)
    if args.threads:        # N processes on one CPU: avoid N x cores threads fighting
        ms.set_context(runtime_num_threads=args.threads)
    if args.blocking:
        ms.runtime.launch_blocking()
    rank, world = 0, 1
    if "MS_ROLE" in os.environ:                      # set by msrun (scheduler or worker)
        from mindspore.communication import get_group_size, get_rank, init
        init()        # the scheduler process serves the cluster inside init() and exits
        rank, world = get_rank(), get_group_size()
    parallel = world > 1 and not args.no_parallel
    if parallel:
        ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL,
                                     gradients_mean=True)
    cl.seed_everything(args.seed)    # the same seed on every rank -> identical initial weights
    return rank, world, parallel


def _shard(args, rank: int, world: int):
    """The same packed blocks everywhere, a different shard per rank."""
    blocks = np.load(args.data) if args.data else prepare_blocks(args.block_size, args.max_docs)
    if blocks.shape[1] != args.block_size + 1:
        raise SystemExit(f"--data has rows of {blocks.shape[1]} tokens but --block-size "
                         f"{args.block_size} needs {args.block_size + 1}; prepare it again.")
    return sharded_dataset(blocks, args.batch_size, rank, world, args.seed)


def _train(args, step_fn, dataset, rank: int):
    """``args.steps`` optimizer steps over the shard (epoch after epoch); only rank 0 logs.
    Returns ``(steps, last loss, seconds)``."""
    t0 = time.perf_counter()
    step, loss = 0, float("nan")
    while step < args.steps:
        for input_ids, labels in dataset.create_tuple_iterator(num_epochs=1):
            loss, norm = step_fn(input_ids, labels)
            step += 1
            loss = float(loss.asnumpy())
            if rank == 0 and (step % args.log_every == 0 or step == 1 or step == args.steps):
                emit(kind="step", rank=0, step=step, loss=round(loss, 4),
                     grad_norm=round(float(norm.asnumpy()), 4))
            if step == args.steps:
                break
    return step, loss, time.perf_counter() - t0


def _save(args, model, final: dict, rank: int) -> tuple[str | None, str | None]:
    """Per-rank weights (the proof that the ranks agree) and rank 0's checkpoint.
    Returns ``(weights file, checkpoint written by this rank or None)``."""
    import mindspore as ms
    if not args.out:
        return None, None
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    weights_file = str(out / f"weights_rank{rank}.npz")
    np.savez(weights_file, **final)
    checkpoint = None
    if rank == 0:
        checkpoint = str(out / "model.ckpt")
        ms.save_checkpoint(model, checkpoint)
    return weights_file, checkpoint


def main(argv=None) -> None:
    import mindspore as ms
    t_start = time.perf_counter()
    args = parse_args(argv)
    rank, world, parallel = _join_cluster(args)
    t_init = time.perf_counter()
    dataset = _shard(args, rank, world)

    from ..baichuan import BaichuanForCausalLM
    model = BaichuanForCausalLM(model_config(args))
    warmup = args.steps // 10 if args.warmup is None else args.warmup
    step_fn = build_train_step(model, warmup_cosine_lr(args.lr, args.steps, warmup),
                               args.clip, parallel)
    start_weights = state_dict(model)
    first = next(dataset.create_tuple_iterator(num_epochs=1))
    emit(kind="start", rank=rank, world=world, parallel=parallel,
         parallel_mode=str(ms.get_auto_parallel_context("parallel_mode")),   # read back, per rank
         init_digest=digest(start_weights),
         shard_batches=dataset.get_dataset_size(), first_batch_sum=int(first[0].asnumpy().sum()),
         init_fingerprint=round(fingerprint(start_weights), 3),
         parameters=int(sum(w.size for w in start_weights.values())),
         init_seconds=round(t_init - t_start, 2), ready_seconds=round(time.perf_counter() - t_start, 2))

    step, loss, seconds = _train(args, step_fn, dataset, rank)
    final = state_dict(model)
    weights_file, checkpoint = _save(args, model, final, rank)
    emit(kind="end", rank=rank, steps=step, last_loss=round(loss, 4), train_seconds=round(seconds, 2),
         steps_per_second=round(step / seconds, 3), fingerprint=round(fingerprint(final), 3),
         weights_file=weights_file, checkpoint=checkpoint)


if __name__ == "__main__":
    main(sys.argv[1:])
