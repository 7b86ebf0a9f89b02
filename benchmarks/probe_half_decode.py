"""The matrix products of one real-size decode step, from float32 copies against float16
weights through the custom F16C kernel (``half_matmul.cc``): what a decode engine on the
model's own float16 parameters could reach, before anyone writes it.

    .venv/bin/python benchmarks/probe_half_decode.py [--models 0.5b 1.5b] [--rows 1 8]

Each variant runs in a fresh process (its own peak memory), holding random weights of the
model's shapes and nothing else (no attention, no cache, no norm: a skeleton of the
products only):

* ``f32``: what the folded engine multiplies per layer: q/k/v in one (in, out) float32
  matrix, o, gate/up in one, down; then the (in, out) head. ``MatMul``, one compiled graph;
* ``half``: the model's own float16 matrices (out, in): q, k, v, o, gate, up, down, and the
  tied head (the embeddings, V x n), each through ``ops.Custom`` running course_lib/half_matmul.cc
  (``half.kernel``).

Printed per model, rows and variant: ms per step (best of 3 rounds of 10 steps after a
warm-up), the weights' bytes, and peak host RSS (VmHWM) of the process from the moment the
weights exist (reset after drawing them: the float32 draws are not counted). Shapes: Qwen2.5-0.5B
(hidden 896, 24 layers, q 896, k/v 128, FFN 4864, vocab 151936, tied) and
DeepSeek-R1-Distill-Qwen-1.5B (hidden 1536, 28 layers, q 1536, k/v 256, FFN 8960, vocab
151936; untied there: the skeleton gives it one head matrix all the same).
"""
import argparse
import ctypes
import json
import os
import subprocess
import sys
import time

SHAPES = {"0.5b": dict(n=896, q=896, kv=128, f=4864, layers=24, vocab=151936),
          "1.5b": dict(n=1536, q=1536, kv=256, f=8960, layers=28, vocab=151936)}


def weights(kind: str, s: dict, rng) -> dict:
    """name -> NumPy weight of each product: (in, out) float32, or (out, in) float16."""
    import numpy as np
    n, q, kv, f = s["n"], s["q"], s["kv"], s["f"]
    if kind == "f32":
        shapes = {"qkv": (n, q + 2 * kv), "o": (q, n), "gate_up": (n, 2 * f), "down": (f, n)}
        head, dtype = (n, s["vocab"]), np.float32
    else:
        shapes = {"q": (q, n), "k": (kv, n), "v": (kv, n), "o": (n, q), "gate": (f, n),
                  "up": (f, n), "down": (n, f)}
        head, dtype = (s["vocab"], n), np.float16
    make = lambda shape: (rng.standard_normal(shape, np.float32) * 0.02).astype(dtype)  # noqa: E731
    out = {f"{name}{i}": make(shape) for i in range(s["layers"]) for name, shape in shapes.items()}
    out["head"] = make(head)
    return out


def skeleton(kind: str, s: dict, arrays: dict, kernel):
    """A Cell computing the step's products in one graph, each layer's outputs used."""
    import mindspore as ms
    from mindspore import Tensor, nn, ops
    mm = ops.MatMul()

    class Skeleton(nn.Cell):
        def __init__(self):
            super().__init__()
            names = sorted({k.rstrip("0123456789") for k in arrays if k != "head"})
            for name in names:
                setattr(self, name, ms.ParameterTuple(
                    ms.Parameter(Tensor.from_numpy(arrays[f"{name}{i}"]), f"{name}{i}",
                                 requires_grad=False) for i in range(s["layers"])))
            self.head = ms.Parameter(Tensor.from_numpy(arrays["head"]), "head", requires_grad=False)

        def p(self, x, w):
            return mm(x, w) if kind == "f32" else kernel(x, w)

        def construct(self, h):
            for i in range(s["layers"]):
                if kind == "f32":
                    a = self.p(h, self.qkv[i])[:, :s["q"]]
                    gate, up = ops.split(self.p(h, self.gate_up[i]), s["f"], -1)
                else:
                    q, k, v = self.p(h, self.q[i]), self.p(h, self.k[i]), self.p(h, self.v[i])
                    a = q + (k.mean() + v.mean())
                    gate, up = self.p(h, self.gate[i]), self.p(h, self.up[i])
                h = h + self.p(a, self.o[i]) + self.p(ops.silu(gate) * up, self.down[i])
            return self.p(h, self.head)
    return Skeleton()


def one(model: str, kind: str, rows: int) -> dict:
    """Build, compile and time one variant in this process."""
    import numpy as np
    import mindspore as ms
    from mindspore import Tensor
    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    kernel = None
    if kind == "half":
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from probe_half_kernels import custom_kernel
        kernel, why_not = custom_kernel()
        if kernel is None:
            return {"skipped": why_not}
    s, rng = SHAPES[model], np.random.default_rng(0)
    arrays = weights(kind, s, rng)
    ctypes.CDLL("libc.so.6").malloc_trim(0)      # the float32 draws are gone: peak from here
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    cell = skeleton(kind, s, arrays, kernel)
    x = Tensor(rng.standard_normal((rows, s["n"])).astype(np.float32))
    cell(x).asnumpy()                                              # compile, warm up
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(10):
            out = cell(x)
        out.asnumpy()
        best = min(best, (time.perf_counter() - start) / 10)
    hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM"))
    return {"ms": best * 1e3, "weights_gb": sum(a.nbytes for a in arrays.values()) / 1e9,
            "peak_gb": hwm * 1024 / 1e9}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", nargs="+", default=["0.5b", "1.5b"], choices=sorted(SHAPES))
    ap.add_argument("--rows", nargs="+", type=int, default=[1, 8])
    ap.add_argument("--one", nargs=3, help=argparse.SUPPRESS)      # model kind rows (child)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(args.one[0], args.one[1], int(args.one[2]))))
        return
    print("load average %.2f %.2f %.2f" % os.getloadavg())
    for model in args.models:
        for rows in args.rows:
            for kind in ("f32", "half"):                            # interleaved per size
                out = subprocess.run([sys.executable, __file__, "--one", model, kind, str(rows)],
                                     capture_output=True, text=True, env={**os.environ, "GLOG_v": "3"})
                r = json.loads(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 else \
                    {"skipped": out.stderr.strip().splitlines()[-1:]}
                line = (f"{r['ms']:8.2f} ms/step  weights {r['weights_gb']:5.2f} GB  peak {r['peak_gb']:5.2f} GB"
                        if "ms" in r else f"not run: {r['skipped']}")
                print(f"{model} rows {rows}  {kind:4}  {line}", flush=True)
    print("load average after %.2f %.2f %.2f" % os.getloadavg())


if __name__ == "__main__":
    main()
