"""Chapter 16 helpers: your own downloaded model, from its folder to fine-tune, merge, export.

    directory = model_directory(os.environ.get("MODEL_DIR"), cl.cache_dir("ch16"), shape)
    print(layout(model))                     # GQA ratio, tied head, biases: read from the Cell
    pieces = token_pieces(tokenizer, ids)    # the prompt as whole characters per token group
    timer = StepTimer(); LLMTrainer(..., callbacks=[ProgressBar(), timer])
    write_chats(path, pairs, system)         # the JSON lines course_lib.finetune reads
    cast_parameters(merged, "float16")       # half-precision weights before export_mindir

Nothing here trains or loads by itself: ``course_lib.pretrained``, ``lora``, ``trainer`` and
``export`` do that; these functions only pick the folder, describe what was loaded, time the
steps, write the small data file and cast weights.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

from mindspore.train import Callback

from . import hf_weights, lookalike

LOOKALIKE_FAMILY = "qwen2"          # Qwen2.5-0.5B-Instruct's layout (lookalike.new_config)


def model_directory(model_dir, cache, shape: dict, family: str = LOOKALIKE_FAMILY) -> Path:
    """``model_dir`` when it names a folder with a ``config.json`` (your download); otherwise
    a look-alike of ``family`` with ``shape`` (``lookalike.new_config``'s size knobs) under
    ``cache``, written once and reused while its ``config.json`` has the same sizes.

    Raises ``FileNotFoundError`` when ``model_dir`` is set but holds no ``config.json``:
    a typo in the path should not silently train a random model instead."""
    if model_dir:
        path = Path(model_dir).expanduser()
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"MODEL_DIR={model_dir!r} has no config.json: point it at the "
                                    "downloaded model folder (the one with config.json), or unset "
                                    "it to use the look-alike.")
        return path
    size = "-".join(f"{shape[k]}" for k in sorted(shape))
    path = Path(cache) / f"{family}-lookalike-{size}"
    if not _same_sizes(path, shape):
        lookalike.write_lookalike(path, family, dtype="bfloat16", fmt="safetensors", shards=1,
                                  **shape)
    return path


def _same_sizes(path: Path, shape: dict) -> bool:
    """True when ``path`` already holds a complete look-alike with ``shape``'s sizes."""
    names = {"hidden_size": "hidden_size", "num_layers": "num_hidden_layers",
             "num_heads": "num_attention_heads", "num_kv_heads": "num_key_value_heads",
             "intermediate_size": "intermediate_size"}
    try:
        cfg = json.loads((path / "config.json").read_text())
    except (OSError, json.JSONDecodeError):
        return False
    weights = (path / "model.safetensors").is_file() and (path / "generation_config.json").is_file()
    return weights and all(cfg.get(names[k]) == v for k, v in shape.items() if k in names)


def layout(model, directory) -> dict:
    """What the loaded model is, read from its course config and its checkpoint: family,
    sizes, GQA ratio, tied head, attention biases, vocabulary matrices stored on disk."""
    c = model.config
    h = c.hidden_size
    stored = hf_weights.checkpoint_signature(directory)
    vocab_matrices = sum(1 for shape, _ in stored.values() if tuple(shape) == (c.vocab_size, h))
    return {"family": model.family, "hidden": h, "layers": c.num_layers, "q_heads": c.num_heads,
            "kv_heads": c.kv_heads, "gqa_ratio": c.num_heads // c.kv_heads,   # MHA: = heads
            "head_dim": c.head_dim, "ffn": c.intermediate_size, "vocab": c.vocab_size,
            "tied_head": bool(c.tie_embeddings), "qkv_bias": bool(c.qkv_bias),
            "o_bias": bool(c.o_bias), "vocab_matrices_on_disk": vocab_matrices,
            "parameters": c.num_parameters()}


def attention_biases(model) -> tuple[bool, bool]:
    """(the Cell has q/k/v biases, the Cell has an o_proj bias), from its parameter names."""
    names = [p.name for p in model.get_parameters() if p.name.endswith(".bias")]
    qkv = any(n.endswith(f"{m}.bias") for n in names
              for m in ("q_proj", "k_proj", "v_proj", "W_pack", "wqkv"))
    return qkv, any(n.endswith("o_proj.bias") for n in names)


def token_pieces(tokenizer, ids) -> list[str]:
    """The prompt as the model reads it: one entry per token, except that tokens holding only
    part of a character (byte-level BPE, byte fallback) are joined until it is whole.
    Special tokens are kept (``<|im_start|>``)."""
    pieces, group = [], []
    for i in ids:
        group.append(int(i))
        text = tokenizer.decode(group, skip_special_tokens=False)
        if not text.endswith("\ufffd"):
            pieces.append(text)
            group = []
    if group:
        pieces.append(tokenizer.decode(group, skip_special_tokens=False))
    return pieces


class StepTimer(Callback):
    """Wall time of every optimizer step (``LLMTrainer`` and ``Model.train`` callbacks):
    ``seconds[0]`` includes compiling the step; ``steady()`` is the median of the rest."""

    def __init__(self):
        self.seconds: list[float] = []
        self._start = None

    def on_train_step_begin(self, run_context):
        self._start = time.perf_counter()

    def on_train_step_end(self, run_context):
        self.seconds.append(time.perf_counter() - self._start)

    def steady(self) -> float:
        rest = sorted(self.seconds[1:] or self.seconds)
        if not rest:
            raise ValueError("StepTimer saw no step: pass it in the trainer's callbacks.")
        mid = len(rest) // 2
        return rest[mid] if len(rest) % 2 else (rest[mid - 1] + rest[mid]) / 2


def write_chats(path, pairs, system: str | None = None) -> Path:
    """``pairs`` of (question, answer) as JSON lines ``{"messages": [...]}`` (the format of
    ``course_lib.finetune``), with an optional system message first; UTF-8, not escaped."""
    if not pairs:
        raise ValueError("write_chats: no (question, answer) pairs given.")
    lines = []
    for question, answer in pairs:
        if not (str(question).strip() and str(answer).strip()):
            raise ValueError(f"write_chats: empty question or answer in {(question, answer)!r}")
        messages = ([{"role": "system", "content": system}] if system else []) + [
            {"role": "user", "content": question}, {"role": "assistant", "content": answer}]
        lines.append(json.dumps({"messages": messages}, ensure_ascii=False))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def cast_parameters(model, dtype: str = "float16"):
    """Store every parameter of ``model`` in ``dtype`` (``Parameter.set_dtype``) and run its
    operators in it (``Cell.to_float``), as ``from_pretrained`` does for a float16 load.
    Used before exporting: a MINDIR whose parameters exceed 1 GiB is written by MindSpore as
    a graph file plus separate weight files, which ``course_lib.export`` does not read.
    Returns the model. On CPU use float16: MindSpore's CPU Gather and MatMul have no bfloat16
    kernels."""
    from .pretrained import _ms_dtype            # the one dtype-name table (and its error)
    target = _ms_dtype(dtype)
    for p in model.get_parameters():
        if p.dtype != target:
            p.set_dtype(target)
    model.to_float(target)
    return model
