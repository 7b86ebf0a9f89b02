"""The learner's own model at its real size, measured: a Qwen2-family look-alike directory with
the real config.json sizes written by transformers in bfloat16 (what the real repos ship), and
one ``generate`` run of the course or of transformers on it, meant for a fresh process
(``runtime.run_isolated(realsize.run, ...)``) so that load time and peak memory are its own.

Used by chapter 16 (section 2) and ``benchmarks/bench_realsize.py``. This module imports
neither MindSpore nor torch at the top: the transformers runners' processes must not hold
MindSpore's memory (``run`` reports whether MindSpore was imported).
"""
from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

import numpy as np

VOCAB = 151936             # the published Qwen2/2.5 and DeepSeek-R1-Distill-Qwen tables
SIZES = {
    # Qwen/Qwen2.5-0.5B-Instruct's config.json (sources in course_lib/lookalike.py)
    "0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                 num_attention_heads=14, num_key_value_heads=2, tie_word_embeddings=True,
                 rope_theta=1e6, max_position_embeddings=32768, eos_token_id=151645),
    # deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B's config.json (a Qwen2, NOT tied)
    "1.5b": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                 num_attention_heads=12, num_key_value_heads=2, tie_word_embeddings=False,
                 rope_theta=1e4, max_position_embeddings=131072, eos_token_id=151643),
}
RUNNERS = ("course", "course-f32", "course-folded", "course-layers", "torch-f32", "torch-bf16")
FLOAT32 = ("course", "course-f32", "course-folded", "torch-f32")   # compute in float32 from the same values


def build(folder, size: str = "0.5b", **overrides) -> Path:
    """The look-alike of ``size`` (``SIZES``; ``overrides`` change config keys, e.g. a smaller
    ``hidden_size`` for a quick run) in ``folder``/<name>: random weights (seed 0) saved by
    transformers' ``save_pretrained`` in bfloat16. Written once, whole or not at all; a
    folder without its config or weights is written again."""
    if size not in SIZES:
        raise ValueError(f"Unknown size {size!r}; choose one of {sorted(SIZES)}.")
    name = size + "".join(f"-{k}={v}" for k, v in sorted(overrides.items()))
    path = Path(folder) / name
    if (path / "config.json").exists() and list(path.glob("*.safetensors")):
        return path
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM
    config = Qwen2Config(vocab_size=VOCAB, rms_norm_eps=1e-6, bos_token_id=151643,
                         use_sliding_window=False, torch_dtype="bfloat16",
                         **{**SIZES[size], **overrides})
    torch.manual_seed(0)
    tmp = path.with_name(path.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    Qwen2ForCausalLM(config).to(torch.bfloat16).save_pretrained(tmp, safe_serialization=True)
    shutil.rmtree(path, ignore_errors=True)
    tmp.replace(path)
    return path


def peak_and_current_gb() -> tuple[float, float]:
    """(peak, current) resident memory of this process in GB (VmHWM, VmRSS of /proc)."""
    with open("/proc/self/status") as f:
        status = dict(line.split(":", 1) for line in f)
    return tuple(float(status[k].split()[0]) / 1e6 for k in ("VmHWM", "VmRSS"))


def _torch_generate(runner: str, path: Path):
    import torch
    from transformers import AutoModelForCausalLM
    dtype = torch.float32 if runner == "torch-f32" else torch.bfloat16
    hf = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).eval()
    hf.generation_config.eos_token_id, hf.generation_config.pad_token_id = None, 0

    def run(prompts, new):
        ids = torch.tensor(prompts, dtype=torch.long)
        with torch.no_grad():
            out = hf.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                              max_new_tokens=new, min_new_tokens=new, use_cache=True)
        return out[:, ids.shape[1]:].tolist()
    return run


def _course_generate(runner: str, path: Path):
    # late: a transformers runner's process must not import MindSpore (module docstring)
    import course_lib as cl
    from .generation import engine_kind, generate
    model = cl.from_pretrained(path, **({"dtype": "float32"} if runner == "course-f32" else {}),
                               verbose=False)
    engine = {"course-layers": "layers", "course-folded": "folded"}.get(runner, "auto")

    def generate_ids(prompts, new):
        return [list(map(int, row)) for row in generate(model, prompts, new, engine=engine)]
    generate_ids.engine = engine_kind(model, engine)              # which engine "auto" chose
    return generate_ids


def run(runner: str, path: str, batch: int = 1, prompt: int = 16, new: int = 32) -> dict:
    """Load ``path`` with ``runner`` (``RUNNERS``: ``course`` is what a learner types,
    ``cl.from_pretrained(dir)`` then ``generate``) and time greedy generation of ``new``
    tokens after ``batch`` random prompts of ``prompt`` ids: load; the first call (the
    course folds and compiles there); the best of two warm calls of 1 token (time to first
    token) and of ``new`` tokens (tokens/s, prefill included); peak and final RSS; for the
    course, the engine ``generate`` used (``generation.engine_kind``)."""
    if runner not in RUNNERS:
        raise ValueError(f"Unknown runner {runner!r}; choose one of {RUNNERS}.")
    prompts = np.random.default_rng(0).integers(100, 150000, (batch, prompt)).tolist()
    start = time.perf_counter()
    load = _torch_generate if runner.startswith("torch") else _course_generate
    generate = load(runner, Path(path))
    load_s = time.perf_counter() - start

    def timed(n):
        t = time.perf_counter()
        out = generate(prompts, n)
        return time.perf_counter() - t, out
    first_s, tokens = timed(new)
    ttft_s = min(timed(1)[0] for _ in range(2))
    seconds = min(timed(new)[0] for _ in range(2))
    peak, now = peak_and_current_gb()
    return dict(runner=runner, batch=batch, load_s=load_s, first_call_s=first_s, ttft_s=ttft_s,
                tokens_per_s=batch * new / seconds, peak_gb=peak, end_gb=now, tokens=tokens,
                engine=getattr(generate, "engine", None),
                mindspore_imported="mindspore" in sys.modules)


def same_tokens(row: dict, reference: dict) -> tuple[int, int]:
    """(tokens of ``row`` equal to ``reference``'s at the same place, all of ``reference``)."""
    same = sum(a == b for ra, rb in zip(row["tokens"], reference["tokens"]) for a, b in zip(ra, rb))
    return same, sum(len(r) for r in reference["tokens"])
