"""Why the course decodes a half-precision checkpoint from a float32 copy on a CPU: what one
of Qwen2.5-0.5B's largest matrices (gate/up: 896 -> 4864) costs MindSpore 2.7's CPU kernels
in a compiled graph, per call, at 1 and 8 rows, by how the weight is stored.

    .venv/bin/python benchmarks/probe_half_kernels.py [--repeats 50]

Rows: the float32 matmul (weight stored (out, in) with ``transpose_b``, and (in, out)); the
float16 weight cast to float32 inside the graph, then the float32 matmul (what computing in
float32 from half-precision storage costs per call); the cast alone; the float16 matmul
(activations cast to float16); and, where g++ and the CPU's F16C/FMA/AVX2 are there, the float16
weight multiplied by a custom kernel that converts each weight in registers as it loads it
(course_lib/half_matmul.cc through ``ops.Custom(func_type="aot")``, ``half.kernel``:
no float32 copy of the weight exists; its result is checked against the float32 matmul).
bfloat16 is not timed: MindSpore 2.7's CPU has no bfloat16 MatMul kernel (chapter 02 prints
the error). Each row is one compiled Cell, called ``--repeats`` times after a warm-up; the
mean per call is printed with the load average and the CPU's model and vector extensions.
"""
import argparse
import os
import time

import numpy as np
import mindspore as ms
from mindspore import Tensor, nn, ops

N, F = 896, 4864
_mm_t, _mm = ops.MatMul(transpose_b=True), ops.MatMul()


class Kernel(nn.Cell):
    """One way to apply a stored weight to the rows ``x`` (float32)."""

    def __init__(self, kind: str, weight: np.ndarray):
        super().__init__()
        self.kind, self.w = kind, ms.Parameter(Tensor(weight), "w", requires_grad=False)

    def construct(self, x):
        if self.kind == "f32 (out, in), transpose_b":
            return _mm_t(x, self.w)
        if self.kind == "f32 (in, out)":
            return _mm(x, self.w)
        if self.kind == "f16 -> f32 cast, then f32 matmul":
            return _mm_t(x, self.w.astype(ms.float32))
        if self.kind == "f16 -> f32 cast alone":
            return self.w.astype(ms.float32)
        if self.kind == CUSTOM:
            return self.custom(x, self.w)
        return _mm_t(x.astype(ms.float16), self.w)                 # f16 matmul


CUSTOM = "f16 weight, custom F16C kernel"


def cpu_line() -> str:
    """The CPU's model name and which of the extensions that matter here it has."""
    from course_lib.half import cpu_flags
    text = open("/proc/cpuinfo").read() if os.path.exists("/proc/cpuinfo") else ""
    model = next((l.split(":", 1)[1].strip() for l in text.splitlines() if l.startswith("model name")), "?")
    flags = cpu_flags()
    wanted = ("avx2", "fma", "f16c", "avx512f", "avx512_bf16", "amx_bf16")
    return f"{model}; " + " ".join(f + ("+" if f in flags else "-") for f in wanted)


def custom_kernel():
    """``ops.Custom`` running course_lib/half_matmul.cc (``half.kernel``: compiled into the
    course cache on first use), or None with the reason it cannot run here."""
    from course_lib import half
    return half.kernel()


CASES = [("f32 (out, in), transpose_b", (F, N), np.float32), ("f32 (in, out)", (N, F), np.float32),
         ("f16 -> f32 cast, then f32 matmul", (F, N), np.float16),
         ("f16 -> f32 cast alone", (F, N), np.float16), ("f16 matmul", (F, N), np.float16),
         (CUSTOM, (F, N), np.float16)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=50)
    args = ap.parse_args()
    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    rng = np.random.default_rng(0)
    print("load average %.2f %.2f %.2f" % os.getloadavg())
    print("CPU:", cpu_line())
    custom, why_not = custom_kernel()
    for rows in (1, 8):
        x = Tensor(rng.standard_normal((rows, N)).astype(np.float32))
        for kind, shape, dtype in CASES:
            if kind == CUSTOM and custom is None:
                print(f"{rows} row(s)  {kind:34} not run: {why_not}")
                continue
            weight = rng.standard_normal(shape).astype(dtype)
            cell = Kernel(kind, weight)
            cell.custom = custom
            got = cell(x).asnumpy()                             # compile, warm up
            if kind == CUSTOM:
                want = x.asnumpy() @ weight.astype(np.float32).T
                np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)
            start = time.perf_counter()
            for _ in range(args.repeats):
                out = cell(x)
            out.asnumpy()
            ms_per_call = (time.perf_counter() - start) / args.repeats * 1e3
            print(f"{rows} row(s)  {kind:34} {ms_per_call:6.2f} ms")
    print("load average after %.2f %.2f %.2f" % os.getloadavg())


if __name__ == "__main__":
    main()
