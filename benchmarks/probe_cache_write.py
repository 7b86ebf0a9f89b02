"""Why the decode step's KV-cache write still copies the whole cache: kernel
times of the ways MindSpore 2.7 can write one slot of a (B, H, slots, d) cache on CPU.

    .venv/bin/python benchmarks/probe_cache_write.py [--batch 8 --slots 512]

Each variant is a GRAPH Cell that writes one new key per (row, head) into a Parameter and
then attends q against the cache (BatchMatMul, as ``DecodeEngine`` does); 100 calls run
under MindSpore's profiler, which reports the time of every kernel type per call:

* ``ScatterNdUpdate`` on the 4-D Parameter (``DecodeEngine`` for small buffers): its CPU
  kernel writes the slot in place, then copies the whole buffer to its output;
* ``ScatterNdAdd`` into a slot that is still zero (``DecodeEngine`` from
  ``engine.ADD_IN_PLACE_BYTES`` on): in place, no copy, but a fixed ~50 us;
* ``ScatterUpdate`` (in place along axis 0) on a flat (B·H·slots, d) Parameter, then the
  Reshape back to (B, H, slots, d) that BatchMatMul needs.
All give the same scores (checked).
"""
import argparse
import os
import sys

import numpy as np
import mindspore as ms
from mindspore import Parameter, Tensor, nn, ops

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from profile_train_step import profile_mindspore  # noqa: E402

_scores = ops.BatchMatMul(transpose_b=True)


class NdUpdate(nn.Cell):
    def __init__(self, shape):
        super().__init__()
        self.cache = Parameter(Tensor(np.zeros(shape, np.float32)), "cache")

    def construct(self, q, k, where):
        return _scores(q, ops.scatter_nd_update(self.cache, where, k))


class NdAdd(NdUpdate):
    """ScatterNdAdd into a slot that is still zero (each slot is written once per generation)."""

    def construct(self, q, k, where):
        return _scores(q, ops.scatter_nd_add(self.cache, where, k))


class FlatUpdate(nn.Cell):
    def __init__(self, shape):
        super().__init__()
        self.shape = shape
        self.cache = Parameter(Tensor(np.zeros((int(np.prod(shape[:3])), shape[3]), np.float32)), "cache")

    def construct(self, q, k, rows):
        return _scores(q, ops.scatter_update(self.cache, rows, k).reshape(self.shape))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--slots", type=int, default=512)
    ap.add_argument("--head-dim", type=int, default=32)
    args = ap.parse_args()
    print("load average %.2f %.2f %.2f" % os.getloadavg())
    ms.set_context(mode=ms.GRAPH_MODE)
    b, h, s, d = args.batch, args.heads, args.slots, args.head_dim
    slot = s // 3
    rng = np.random.default_rng(0)
    q = Tensor(rng.normal(size=(b, h, 1, d)).astype(np.float32))
    k = Tensor(rng.normal(size=(b, h, 1, d)).astype(np.float32))
    where = np.stack(np.meshgrid(np.arange(b), np.arange(h), [slot], indexing="ij"), -1)
    rows = (np.arange(b)[:, None] * h + np.arange(h)[None]) * s + slot
    cases = {"ScatterNdUpdate, 4-D cache": (NdUpdate((b, h, s, d)), Tensor(where.astype(np.int32))),
             "ScatterNdAdd into a zero slot, 4-D cache": (NdAdd((b, h, s, d)), Tensor(where.astype(np.int32))),
             "ScatterUpdate, flat cache + Reshape": (FlatUpdate((b, h, s, d)),
                                                     Tensor(rows[:, :, None].astype(np.int32)))}
    outputs = []
    print(f"cache ({b}, {h}, {s}, {d}) float32 = {b * h * s * d * 4 / 2**20:.2f} MiB per layer and kind")
    for name, (cell, index) in cases.items():
        outputs.append(cell(q, k, index).asnumpy())

        def run():
            for _ in range(100):
                out = cell(q, k, index)
            out.asnumpy()
        times, _, wall = profile_mindspore(run, 1)
        kernels = ", ".join(f"{op} {1e3 * t / 100:.1f} us" for op, t in sorted(times.items()))
        print(f"{name}: {kernels} per call (wall {wall * 10:.0f} us per call)")
    print("same scores:", all(np.array_equal(outputs[0], o) for o in outputs[1:]))
    print("load average %.2f %.2f %.2f" % os.getloadavg())


if __name__ == "__main__":
    main()
