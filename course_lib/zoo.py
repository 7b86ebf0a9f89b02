"""The course's small model zoo: trained once, cached, reused by every chapter.

    model, tok, info = load_or_train("internlm-tiny")                 # news-pretrained base
    model, tok, info = load_or_train("internlm-tiny-sentiment-lora")  # base + LoRA adapter

The first call trains (through ``LLMTrainer``, GRAPH mode, seeded) and stores the result in
``cl.cache_dir("zoo")``; later calls — in any notebook — just load it. The cache key is a
hash of everything that changes the result: the model config, the recipe (steps, batch,
lr, ...), the scale (``COURSE_SCALE``) and the tokenizer's vocabulary. Change any of them
and a new entry is trained; nothing stale is ever reused.

* ``internlm-tiny``: InternLM architecture (``course_lib.internlm.tiny()``: hidden 128,
  2 layers, 4 heads, vocab 8000) pretrained on the People's Daily news corpus, part of it
  in the chat template as "continue this news" exchanges (``pretraining_texts``).
  By default (``COURSE_BASE=shipped``) this is the base that ships with the course in
  ``data/base/`` (trained once with the full-scale recipe by ``python -m course_lib.zoo
  build-base``; float16 safetensors + config.json + tokenizer, SHA-256 in data/README.md):
  no chapter waits for pretraining. ``COURSE_BASE=own`` trains (and caches) the base with
  the recipe of the scale in force instead.
* ``internlm-tiny-sentiment-lora``: that base plus a LoRA adapter (r=8 on all seven linear
  layers of every decoder layer, ``LORA_TARGETS``) fine-tuned on the review-sentiment SFT
  data (``course_lib.sft``); only the adapter (a few hundred KB) is cached, the base comes
  from the entry above.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from .runtime import cache_dir, seed_everything
from .safeio import atomic_write
from .scale import at_scale, current_scale, pick

ZOO_FORMAT = "course_lib.zoo/1"
BASE = "internlm-tiny"
SENTIMENT_LORA = "internlm-tiny-sentiment-lora"
NAMES = (BASE, SENTIMENT_LORA)


# --------------------------------------------------------------------------------------
# Recipes (sizes read at call time, so COURSE_SCALE set in a test/notebook is honoured)
# --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PretrainRecipe:
    steps: int
    batch_size: int
    block_size: int
    max_docs: int               # news training documents tokenised for the run
    lr: float = 3e-3
    warmup_steps: int = 20
    weight_decay: float = 0.1
    clip: float = 1.0
    seed: int = 0
    chat_fraction: float = 0.3  # news documents shown in the chat template (see pretraining_texts)
    config: dict = field(default_factory=dict)   # overrides of internlm.tiny()


# Every linear layer of a decoder layer (attention and MLP), as QLoRA recommends. Notebook 08
# (section 8) measures the alternative, q_proj + v_proj only, with the same r, alpha and lr.
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class LoRARecipe:
    steps: int
    batch_size: int
    max_len: int
    train_examples: int
    r: int = 8
    alpha: float = 16.0
    targets: tuple = LORA_TARGETS
    lr: float = 5e-3            # 5x the full fine-tuning lr of chapter 08 (1e-3): B starts at 0
    warmup_steps: int = 10
    seed: int = 0


def pretrain_recipe(**overrides) -> PretrainRecipe:
    r = PretrainRecipe(steps=pick(ci=60, full=1200), batch_size=pick(ci=8, full=16),
                       block_size=pick(ci=64, full=128), max_docs=pick(ci=1500, full=20000),
                       warmup_steps=pick(ci=6, full=60))
    return replace(r, **overrides) if overrides else r


def lora_recipe(**overrides) -> LoRARecipe:
    # CI: 300 steps of 16 on 4,800 reviews is the least that learns the task on the shipped
    # base (benchmarks/lora_payoff.py; 60 steps of 8 on 480 reviews stayed at the majority).
    r = LoRARecipe(steps=pick(ci=300, full=400), batch_size=16,
                   max_len=pick(ci=64, full=96), train_examples=pick(ci=4800, full=13890),
                   warmup_steps=pick(ci=6, full=20))
    return replace(r, **overrides) if overrides else r


def base_config(recipe: PretrainRecipe):
    from .internlm import tiny
    return tiny(**recipe.config)


# --------------------------------------------------------------------------------------
# Cache bookkeeping
# --------------------------------------------------------------------------------------
@dataclass
class ZooInfo:
    name: str
    key: str
    path: Path
    trained_now: bool
    recipe: dict
    history: dict = field(default_factory=dict)
    metrics: dict = field(default_factory=dict)
    train_seconds: float = 0.0

    def __str__(self) -> str:
        how = ("trained now" if self.trained_now else "shipped with the course (data/base)"
               if self.key.startswith("shipped-") else "loaded from cache")
        extra = ", ".join(f"{k} {v:.4g}" for k, v in self.metrics.items())
        return f"{self.name} [{self.key}] {how}" + (f" ({extra})" if extra else "")


def _tokenizer_digest(tokenizer) -> str:
    vocab = sorted(tokenizer.backend.get_vocab().items())
    return hashlib.sha1(json.dumps(vocab, ensure_ascii=False).encode()).hexdigest()[:12]


def cache_key(name: str, recipe, tokenizer, parent_key: str = "") -> str:
    payload = {"format": ZOO_FORMAT, "name": name, "recipe": _jsonable(asdict(recipe)),
               "scale": current_scale(), "tokenizer": _tokenizer_digest(tokenizer),
               "parent": parent_key}
    if isinstance(recipe, PretrainRecipe):
        payload["config"] = base_config(recipe).to_dict()
    return hashlib.sha1(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:12]


def _jsonable(d):
    return json.loads(json.dumps(d, default=list))


def _paths(name: str, key: str, suffix: str) -> tuple[Path, Path]:
    root = cache_dir("zoo")
    return root / f"{name}-{key}{suffix}", root / f"{name}-{key}.json"


def _write_atomic(path: Path, writer) -> None:
    """Temporary file in the same directory, fsync, rename (``course_lib.safeio``): a
    notebook interrupted mid-write (or two notebooks training the same entry at once)
    never leaves a torn file behind."""
    atomic_write(path, writer)


# --------------------------------------------------------------------------------------
# Building, training, loading
# --------------------------------------------------------------------------------------
def new_base(recipe: PretrainRecipe | None = None):
    """An untrained InternLM-tiny of the recipe's config (seeded init)."""
    from .internlm import InternLMForCausalLM
    recipe = recipe or pretrain_recipe()
    seed_everything(recipe.seed)
    return InternLMForCausalLM(base_config(recipe))


CONTINUE_PROMPT = "续写下面的新闻："


def pretraining_texts(documents, tokenizer, chat_fraction: float, seed: int = 0) -> list[str]:
    """News documents, a seeded ``chat_fraction`` of them rewritten as a chat exchange:
    ``<|user|>续写下面的新闻：<first sentence><|end|><|assistant|><the rest><|end|>``.

    Why: base LLMs meet instruction-like text during pre-training, so their special tokens
    are not untrained. A base that never saw ``<|assistant|>``/``<|end|>`` as targets
    assigns ``<|end|>`` a log-probability near -19 after any answer; frozen weights plus a
    LoRA on q/v cannot undo that, and the SFT comparison would measure the template, not
    the task. The task (sentiment) never appears here: it is learned only in fine-tuning."""
    from .data import split_sentences
    rng = np.random.default_rng(seed)
    texts = []
    for doc in documents:
        sentences = split_sentences(doc)
        if len(sentences) >= 2 and rng.random() < chat_fraction:
            texts.append(tokenizer.format_chat(CONTINUE_PROMPT + sentences[0],
                                               "".join(sentences[1:])))
        else:
            texts.append(doc)
    return texts


def _pretrain(recipe: PretrainRecipe, tokenizer, progress: bool):
    from .data import news_splits
    from .callbacks import ProgressBar
    from .pipelines import lm_dataset
    from .trainer import LLMTrainer

    model = new_base(recipe)
    splits = news_splits()
    texts = pretraining_texts(splits.train[: recipe.max_docs], tokenizer, recipe.chat_fraction,
                              recipe.seed)
    train = lm_dataset(texts, tokenizer, recipe.block_size, recipe.batch_size, shuffle=True,
                       seed=recipe.seed)
    val = validation_dataset(recipe, tokenizer)
    callbacks = [ProgressBar(recipe.steps, "pretrain internlm-tiny")] if progress else []
    trainer = LLMTrainer(model, train, val, lr=recipe.lr, steps=recipe.steps,
                         warmup_steps=recipe.warmup_steps, weight_decay=recipe.weight_decay,
                         clip=recipe.clip, callbacks=callbacks, mode="graph",
                         data_seed=recipe.seed, eval_batches=8)
    start = time.perf_counter()
    history = trainer.train()
    seconds = time.perf_counter() - start
    model.set_train(False)
    return model, {"loss": history["loss"], "lr": history["lr"]}, trainer, seconds


def validation_dataset(recipe: PretrainRecipe, tokenizer):
    """The held-out news split a base of ``recipe`` is evaluated on (never trained on)."""
    from .data import news_splits
    from .pipelines import lm_dataset
    docs = news_splits().validation[: max(1, recipe.max_docs // 10)]
    return lm_dataset(docs, tokenizer, recipe.block_size, recipe.batch_size, shuffle=False)


def _metrics(trainer, history) -> dict:
    return {"train_loss_last10": float(np.mean(history["loss"][-10:])),
            **{f"val_{k}": v for k, v in trainer.evaluate().items()}}


def _load_weights(model, path: Path) -> None:
    import mindspore as ms
    from .hf_weights import check_compatible
    params = ms.load_checkpoint(str(path))
    check_compatible({p.name: tuple(p.shape) for p in model.get_parameters()}, params,
                     source=str(path), target="the zoo model")
    not_loaded, unused = ms.load_param_into_net(model, params, strict_load=True)
    if not_loaded or unused:
        raise ValueError(f"{path} does not fit the model (missing {not_loaded[:3]}, "
                         f"unexpected {unused[:3]}).")


_INFO_TYPES = {"recipe": dict, "history": dict, "metrics": dict, "train_seconds": (int, float)}


def _info_problem(info) -> str:
    if not isinstance(info, dict):
        return f"expected a JSON object, got {type(info).__name__}"
    for key, kind in _INFO_TYPES.items():
        if not isinstance(info.get(key), kind) or isinstance(info.get(key), bool):
            return f"{key!r} missing or not a {getattr(kind, '__name__', 'number')}"
    if not all(isinstance(v, list) for v in info["history"].values()):
        return "history values are not lists"
    return ""


def _read_info(meta: Path) -> dict | None:
    """The entry's JSON metadata; None (and the file is rewritten later) when it is
    missing, undecodable (torn write, invalid UTF-8) or of the wrong content."""
    if not meta.exists():
        return None
    try:
        info = json.loads(meta.read_text(encoding="utf-8"))
        problem = _info_problem(info)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        problem = type(err).__name__
    if problem:
        print(f"zoo: metadata {meta} is unusable ({problem}); it will be rebuilt.")
        return None
    return info


def _write_info(meta: Path, info: "ZooInfo") -> None:
    _write_atomic(meta, lambda tmp: tmp.write_text(json.dumps(
        {"recipe": info.recipe, "history": info.history, "metrics": info.metrics,
         "train_seconds": info.train_seconds}), encoding="utf-8"))


def load_base(tokenizer=None, *, source: str | None = None, retrain: bool = False,
              progress: bool = True, **overrides):
    """The news-pretrained InternLM-tiny: ``(model, tokenizer, ZooInfo)``.

    ``source`` (default: ``COURSE_BASE``, else ``"shipped"``): ``"shipped"`` loads the base
    in ``data/base/`` (the same at every scale; nothing is trained); ``"own"`` trains the
    recipe of the scale in force (``overrides`` change it) and caches the result."""
    import mindspore as ms
    from .tokenizer import load_tokenizer

    source = base_source(source)
    if source == "shipped":
        if retrain or overrides:
            raise ValueError("retrain/recipe overrides apply to a base you train yourself: "
                             "pass source='own' (or set COURSE_BASE=own).")
        return load_shipped_base(tokenizer)
    tokenizer = tokenizer or load_tokenizer()
    recipe = pretrain_recipe(**overrides)
    key = cache_key(BASE, recipe, tokenizer)
    ckpt, meta = _paths(BASE, key, ".ckpt")
    if not retrain and ckpt.is_file():
        saved = _read_info(meta) or {}   # written after the checkpoint: may be missing
        model = new_base(recipe)
        try:
            _load_weights(model, ckpt)
            model.set_train(False)
            info = ZooInfo(BASE, key, ckpt, False, saved.get("recipe", _jsonable(asdict(recipe))),
                           saved.get("history", {}), saved.get("metrics", {}),
                           saved.get("train_seconds", 0.0))
            if not saved:
                _write_info(meta, info)
            return model, tokenizer, info
        except Exception as err:  # torn/corrupt cache entry: say so and rebuild it
            print(f"zoo: cached {ckpt.name} is unreadable ({type(err).__name__}); retraining.")
    model, history, trainer, seconds = _pretrain(recipe, tokenizer, progress)
    # The weights are saved first: minutes of training must survive whatever comes next.
    _write_atomic(ckpt, lambda tmp: ms.save_checkpoint(model, str(tmp)))
    info = ZooInfo(BASE, key, ckpt, True, _jsonable(asdict(recipe)), history, {}, seconds)
    _write_info(meta, info)
    info.metrics = _metrics(trainer, history)
    _write_info(meta, info)
    return model, tokenizer, info


# --------------------------------------------------------------------------------------
# The shipped base: data/base/ (the offline equivalent of from_pretrained("a hub name"))
# --------------------------------------------------------------------------------------
BASE_SOURCES = ("shipped", "own")
SHIPPED_DIR = Path(__file__).resolve().parents[1] / "data" / "base"
SHIPPED_WEIGHTS = "model.safetensors"
PROVENANCE = "provenance.json"
EVAL_BATCHES = 8            # validation batches behind every base perplexity the zoo reports


def base_source(source: str | None = None) -> str:
    """``"shipped"`` (default) or ``"own"``: ``source``, else ``COURSE_BASE``."""
    value = (source or os.environ.get("COURSE_BASE") or "shipped").strip().lower()
    if value not in BASE_SOURCES:
        raise ValueError(f"COURSE_BASE={value!r} is not a base source; use 'shipped' (the base "
                         "in data/base/, nothing to train) or 'own' (train it with the recipe "
                         "of COURSE_SCALE, as chapter 07 teaches).")
    return value


def sha256_of(path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def shipped_provenance(directory: Path = SHIPPED_DIR) -> dict:
    """``data/base/provenance.json``: recipe, loss history, metrics, SHA-256 of the weights."""
    path = Path(directory) / PROVENANCE
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise FileNotFoundError(
            f"The shipped base is incomplete: {path} is missing or unreadable ({err}). Restore "
            "it with `git checkout -- data/base`, rebuild it with `make base`, or train your "
            "own with COURSE_BASE=own.") from None


def _check_shipped(directory: Path, provenance: dict, tokenizer) -> str:
    weights = directory / SHIPPED_WEIGHTS
    if not weights.is_file():
        raise FileNotFoundError(f"No {weights}: restore it with `git checkout -- data/base` "
                                "or rebuild it with `make base` (or use COURSE_BASE=own).")
    digest = sha256_of(weights)
    if digest != provenance["sha256"]:
        raise ValueError(
            f"{weights} is not the shipped base: SHA-256 {digest[:16]}..., expected "
            f"{provenance['sha256'][:16]}... (changed, truncated, or a Git LFS pointer). "
            "Restore it with `git checkout -- data/base` or rebuild it with `make base`.")
    if _tokenizer_digest(tokenizer) != provenance["tokenizer"]:
        raise ValueError("This tokenizer is not the one the shipped base was trained with "
                         f"(vocabulary digest {_tokenizer_digest(tokenizer)}, expected "
                         f"{provenance['tokenizer']}): use course_lib.tokenizer.load_tokenizer().")
    return digest


def load_shipped_base(tokenizer=None, directory: Path = SHIPPED_DIR):
    """The base in ``data/base/`` (float16 on disk, float32 in memory), checked against its
    provenance: ``(model, tokenizer, ZooInfo)``. Trains nothing, writes nothing."""
    from .pretrained import from_pretrained
    from .tokenizer import load_tokenizer
    directory = Path(directory)
    provenance = shipped_provenance(directory)
    tokenizer = tokenizer or load_tokenizer()
    digest = _check_shipped(directory, provenance, tokenizer)
    model = from_pretrained(directory, dtype="float32", verbose=False)
    model.set_train(False)
    info = ZooInfo(BASE, f"shipped-{digest[:12]}", directory / SHIPPED_WEIGHTS, False,
                   provenance["recipe"], provenance["history"], provenance["metrics"],
                   provenance["train_seconds"])
    return model, tokenizer, info


def validation_perplexity(model, tokenizer=None, recipe: PretrainRecipe | None = None, *,
                          data=None, max_batches: int | None = EVAL_BATCHES) -> dict:
    """``{"loss", "perplexity"}`` of ``model`` on the first ``max_batches`` batches of
    ``data`` (default: the held-out split of ``recipe``, by default the full-scale recipe
    the shipped base was trained with; ``max_batches=None`` reads all of ``data``)."""
    from .trainer import LLMTrainer
    if data is None:
        if recipe is None:
            with at_scale("full"):
                recipe = pretrain_recipe()
        data = validation_dataset(recipe, tokenizer)
    return LLMTrainer(model, data, data, steps=1, mode="graph",
                      eval_batches=max_batches).evaluate()


def build_base(out_dir: Path = SHIPPED_DIR, *, reuse_cache: bool = False,
               progress: bool = True) -> dict:
    """Rebuild ``data/base/``: pretrain InternLM-tiny with the full-scale recipe (seeded,
    GRAPH mode; ``reuse_cache`` takes the zoo's cached run instead of training again),
    save it as float16 safetensors + config.json + tokenizer.json, measure the float16
    weights' validation perplexity, and write provenance.json. Returns the provenance."""
    import mindspore as ms
    from .pretrained import from_pretrained, save_pretrained
    from .tokenizer import SHIPPED_PATH
    with at_scale("full"):
        recipe = pretrain_recipe()
        model, tok, info = load_base(source="own", retrain=not reuse_cache, progress=progress)
    out_dir = Path(out_dir)
    staging = out_dir.with_name(f".tmp-{out_dir.name}")
    shutil.rmtree(staging, ignore_errors=True)
    save_pretrained(model, staging, dtype=np.float16)
    shutil.copyfile(SHIPPED_PATH, staging / "tokenizer.json")
    val = validation_perplexity(from_pretrained(staging, dtype="float32", verbose=False), tok, recipe)
    provenance = {"recipe": info.recipe, "sha256": sha256_of(staging / SHIPPED_WEIGHTS),
                  "tokenizer": _tokenizer_digest(tok), "eval_batches": EVAL_BATCHES,
                  "metrics": {**info.metrics, "val_loss_float16": val["loss"],
                              "val_perplexity_float16": val["perplexity"]},
                  "train_seconds": info.train_seconds, "history": info.history,
                  "built_with": {"mindspore": ms.__version__, "numpy": np.__version__}}
    (staging / PROVENANCE).write_text(json.dumps(provenance, indent=1), encoding="utf-8")
    _swap_directory(staging, out_dir)
    return provenance


def _swap_directory(new: Path, target: Path) -> None:
    """Replace ``target`` by the complete directory ``new`` (the old one stays until then)."""
    old = target.with_name(f".old-{target.name}")
    shutil.rmtree(old, ignore_errors=True)
    if target.exists():
        target.rename(old)
    new.rename(target)
    shutil.rmtree(old, ignore_errors=True)


def sentiment_examples(n_train: int | None = None, n_eval: int | None = None):
    """(train, validation, test) lists of (review, label) from ``review_splits()``; the
    first ``n`` of each split (the splits are already shuffled, so these are random)."""
    from .data import review_splits
    s = review_splits()
    return (s.train[:n_train], s.validation[:n_eval], s.test[:n_eval])


def sentiment_lora_run(model, tokenizer, recipe: LoRARecipe | None = None, *,
                       progress: bool = True):
    """Inject LoRA into ``model`` and fine-tune the adapters on the review SFT data with
    ``recipe`` (``course_lib.sft.finetune``). Returns the measured ``FinetuneRun``."""
    from .callbacks import ProgressBar
    from .sft import finetune

    recipe = recipe or lora_recipe()
    train, _, _ = sentiment_examples(recipe.train_examples)
    callbacks = [ProgressBar(recipe.steps, f"LoRA r={recipe.r}")] if progress else []
    return finetune(model, tokenizer, train, method="lora", r=recipe.r, alpha=recipe.alpha,
                    targets=recipe.targets, steps=recipe.steps, lr=recipe.lr,
                    batch_size=recipe.batch_size, max_len=recipe.max_len,
                    warmup_steps=recipe.warmup_steps, seed=recipe.seed, callbacks=callbacks)


def store_sentiment_lora(run, tokenizer, base_info: ZooInfo,
                         recipe: LoRARecipe | None = None) -> ZooInfo:
    """Cache the adapter of a ``sentiment_lora_run`` (so that other notebooks load it)."""
    from .lora import save_adapter

    recipe = recipe or lora_recipe()
    key = cache_key(SENTIMENT_LORA, recipe, tokenizer, parent_key=base_info.key)
    adapter, meta = _paths(SENTIMENT_LORA, key, ".safetensors")
    history = {"loss": run.history["loss"], "lr": run.history["lr"]}
    metrics = {"train_loss_last10": float(np.mean(history["loss"][-10:])),
               "step_seconds": run.step_seconds}
    seconds = run.compile_seconds + run.step_seconds * (len(history["loss"]) - 1)
    _write_atomic(adapter, lambda tmp: save_adapter(run.model, tmp))
    info = ZooInfo(SENTIMENT_LORA, key, adapter, True, _jsonable(asdict(recipe)), history,
                   metrics, seconds)
    _write_info(meta, info)
    return info


def load_sentiment_lora(tokenizer=None, *, retrain: bool = False, progress: bool = True,
                        base_overrides: dict | None = None, **overrides):
    """The base with the sentiment LoRA adapter loaded: ``(model, tokenizer, ZooInfo)``."""
    from .lora import load_adapter

    model, tokenizer, base_info = load_base(tokenizer, progress=progress,
                                            **(base_overrides or {}))
    recipe = lora_recipe(**overrides)
    key = cache_key(SENTIMENT_LORA, recipe, tokenizer, parent_key=base_info.key)
    adapter, meta = _paths(SENTIMENT_LORA, key, ".safetensors")
    saved = None if retrain else _read_info(meta)
    if saved is not None and adapter.is_file():
        try:
            load_adapter(model, adapter)          # checks it was trained on this very base
            return model, tokenizer, ZooInfo(SENTIMENT_LORA, key, adapter, False,
                                             saved["recipe"], saved["history"],
                                             saved["metrics"], saved["train_seconds"])
        except Exception as err:
            print(f"zoo: cached {adapter.name} is unusable ({type(err).__name__}); retraining.")
            model, tokenizer, base_info = load_base(tokenizer, progress=progress,
                                                    **(base_overrides or {}))
    run = sentiment_lora_run(model, tokenizer, recipe, progress=progress)
    return model, tokenizer, store_sentiment_lora(run, tokenizer, base_info, recipe)


def load_or_train(name: str = BASE, **kwargs):
    """``(model, tokenizer, info)`` for a zoo entry; trains and caches it if missing."""
    loaders = {BASE: load_base, SENTIMENT_LORA: load_sentiment_lora}
    if name not in loaders:
        raise ValueError(f"Unknown zoo model {name!r}; available: {list(loaders)}.")
    return loaders[name](**kwargs)


def main(argv=None) -> None:
    import argparse
    ap = argparse.ArgumentParser(prog="python -m course_lib.zoo",
                                 description="The course's model zoo.")
    sub = ap.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build-base", help="rebuild data/base/ (about 11 min on 2 cores)")
    build.add_argument("--out", type=Path, default=SHIPPED_DIR)
    build.add_argument("--reuse-cache", action="store_true",
                       help="use the zoo's cached full-scale run instead of training again")
    args = ap.parse_args(argv)
    import course_lib as cl
    cl.setup(device="CPU", seed=0, quiet=True)
    prov = build_base(args.out, reuse_cache=args.reuse_cache)
    print(f"{args.out}: sha256 {prov['sha256']}; validation perplexity (float16 weights) "
          f"{prov['metrics']['val_perplexity_float16']:.2f}; trained in "
          f"{prov['train_seconds']:.0f} s")


if __name__ == "__main__":
    main()
