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
* ``internlm-tiny-sentiment-lora``: that base plus a LoRA adapter (r=8 on all seven linear
  layers of every decoder layer, ``LORA_TARGETS``) fine-tuned on the review-sentiment SFT
  data (``course_lib.sft``); only the adapter (a few hundred KB) is cached, the base comes
  from the entry above.
"""
from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from .runtime import cache_dir, seed_everything
from .safeio import atomic_write
from .scale import current_scale, pick

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


# Every linear layer of a decoder layer (attention and MLP), as QLoRA recommends. Measured
# at full scale on the news-pretrained base (600 test reviews, majority 0.535): q_proj +
# v_proj only reach 0.588 at lr 2e-3 and 0.637 at lr 1e-2; all seven reach 0.735 at lr 5e-3.
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
    r = LoRARecipe(steps=pick(ci=60, full=400), batch_size=pick(ci=8, full=16),
                   max_len=pick(ci=64, full=96), train_examples=pick(ci=480, full=13890),
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
        how = "trained now" if self.trained_now else "loaded from cache"
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
    val = lm_dataset(splits.validation[: max(1, recipe.max_docs // 10)], tokenizer,
                     recipe.block_size, recipe.batch_size, shuffle=False)
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


def load_base(tokenizer=None, *, retrain: bool = False, progress: bool = True, **overrides):
    """The news-pretrained InternLM-tiny: ``(model, tokenizer, ZooInfo)``."""
    import mindspore as ms
    from .tokenizer import load_tokenizer

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
