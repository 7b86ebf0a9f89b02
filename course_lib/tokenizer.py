"""The course's subword tokenizer: byte-level BPE trained on the news corpus.

Byte-level means every UTF-8 byte is in the base alphabet, so *any* text — characters the
training corpus never saw, emoji, English — encodes without an unknown token and decodes
back to exactly the same string. Training is deterministic; the result ships as
``data/tokenizer.json`` and ``tests/test_tokenizer.py`` proves retraining reproduces it.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

VOCAB_SIZE = 8000
PAD, BOS, EOS = "<pad>", "<bos>", "<eos>"
SYSTEM, USER, ASSISTANT, END = "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"
SPECIAL_TOKENS = [PAD, BOS, EOS, SYSTEM, USER, ASSISTANT, END]  # ids 0..6 in this order
SHIPPED_PATH = Path(__file__).resolve().parents[1] / "data" / "tokenizer.json"


class CourseTokenizer:
    """A thin, explicit wrapper over a ``tokenizers.Tokenizer``."""

    def __init__(self, backend):
        self.backend = backend
        ids = [backend.token_to_id(t) for t in SPECIAL_TOKENS]
        if None in ids:
            missing = [t for t, i in zip(SPECIAL_TOKENS, ids) if i is None]
            raise ValueError(f"Tokenizer lacks the course's special tokens {missing}; "
                             "train it with course_lib.tokenizer.train_tokenizer.")
        self.pad_id, self.bos_id, self.eos_id = ids[:3]
        self.system_id, self.user_id, self.assistant_id, self.end_id = ids[3:]
        self.special_ids = frozenset(ids)

    @property
    def vocab_size(self) -> int:
        return self.backend.get_vocab_size()

    def encode(self, text: str, add_bos: bool = False, add_eos: bool = False) -> list[int]:
        if not isinstance(text, str):
            raise TypeError(f"encode() takes a str, got {type(text).__name__}")
        ids = self.backend.encode(text, add_special_tokens=False).ids
        return ([self.bos_id] if add_bos else []) + ids + ([self.eos_id] if add_eos else [])

    def encode_batch(self, texts: Sequence[str], add_bos=False, add_eos=False) -> list[list[int]]:
        if isinstance(texts, str):
            raise TypeError("encode_batch() takes a list of str; for one text use encode(text) "
                            f"or encode_batch([text]) (a bare str would be split into "
                            f"{len(texts)} one-character texts).")
        texts = list(texts)
        bad = [type(t).__name__ for t in texts if not isinstance(t, str)]
        if bad:
            raise TypeError(f"encode_batch() takes a list of str, found {bad[0]} items.")
        return [([self.bos_id] if add_bos else []) + e.ids + ([self.eos_id] if add_eos else [])
                for e in self.backend.encode_batch(list(texts), add_special_tokens=False)]

    def decode(self, ids: Iterable[int], skip_special: bool = True) -> str:
        if isinstance(ids, (str, bytes)):
            raise TypeError("decode() takes a list of int token ids (from encode), got a "
                            f"{type(ids).__name__}.")
        ids = list(ids.tolist() if hasattr(ids, "tolist") else ids)
        floats = [i for i in ids if isinstance(i, bool) or not isinstance(
            i, (int, np.integer))]
        if floats:
            raise TypeError(f"decode() takes integer token ids, got {floats[0]!r} "
                            f"({type(floats[0]).__name__}); ids are never fractional: take "
                            "argmax/sample indices as int (e.g. ids.astype(int)).")
        ids = [int(i) for i in ids]
        bad = [i for i in ids if not 0 <= i < self.vocab_size]
        if bad:
            raise ValueError(f"Token ids {bad[:5]} are outside the vocabulary [0, {self.vocab_size}).")
        return self.backend.decode(ids, skip_special_tokens=skip_special)

    def tokens(self, text: str) -> list[str]:
        """The pieces as readable text (byte-level pieces decoded one by one)."""
        return [self.backend.decode([i]) for i in self.encode(text)]

    # --- chat / instruction format -------------------------------------------------
    def format_chat(self, user: str, assistant: str | None = None) -> str:
        """``<|user|>…<|end|><|assistant|>…<|end|>``; without ``assistant`` the string ends
        right after ``<|assistant|>`` — the prompt a model completes."""
        prompt = f"{USER}{user}{END}{ASSISTANT}"
        return prompt if assistant is None else f"{prompt}{assistant}{END}"

    def encode_chat(self, user: str, assistant: str) -> tuple[list[int], list[int]]:
        """Token ids of a full exchange and a 0/1 mask that is 1 only on the answer tokens
        (and the closing <|end|>) — the tokens an SFT loss should learn."""
        prompt = [self.bos_id] + self.encode(self.format_chat(user))
        answer = self.encode(assistant) + [self.end_id]
        return prompt + answer, [0] * len(prompt) + [1] * len(answer)

    def save(self, path) -> None:
        self.backend.save(str(path))


def train_tokenizer(texts: Iterable[str], vocab_size: int = VOCAB_SIZE) -> CourseTokenizer:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    if vocab_size < 256 + len(SPECIAL_TOKENS):
        raise ValueError(f"vocab_size must be at least {256 + len(SPECIAL_TOKENS)} "
                         "(256 byte tokens + the special tokens).")
    texts = list(texts)
    if not any(texts):
        raise ValueError("Cannot train a tokenizer on empty text.")
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    backend.train_from_iterator(texts, trainer)
    return CourseTokenizer(backend)


def train_course_tokenizer() -> CourseTokenizer:
    """The exact recipe behind ``data/tokenizer.json``: news *train* split, 8000 tokens."""
    from .data import news_splits
    return train_tokenizer(news_splits().train, VOCAB_SIZE)


def _read_tokenizer(path: Path) -> CourseTokenizer:
    """A tokenizer file, or a ValueError that names the file and what to do."""
    from tokenizers import Tokenizer
    try:
        backend = Tokenizer.from_file(str(path))
    except Exception as err:   # tokenizers raises a bare Exception on a torn/foreign file
        raise ValueError(f"Cannot read the tokenizer file {path}: it is corrupt or not a "
                         f"`tokenizers` JSON file ({str(err)[:120]}). Delete it to rebuild "
                         "it (course cache) or restore it with `git checkout data/"
                         "tokenizer.json` (shipped file).") from err
    return CourseTokenizer(backend)


def load_tokenizer(path: str | Path | None = None) -> CourseTokenizer:
    """Load ``data/tokenizer.json`` (or ``path``). If the shipped file is missing, retrain
    it with the recorded recipe and cache it (a corrupt cached copy is rebuilt)."""
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"No tokenizer file at {path}.")
        return _read_tokenizer(path)
    if SHIPPED_PATH.is_file():
        return _read_tokenizer(SHIPPED_PATH)
    from .runtime import cache_dir
    from .safeio import atomic_write
    cached = cache_dir("tokenizer") / "tokenizer.json"
    if cached.is_file():
        try:
            return _read_tokenizer(cached)
        except ValueError:
            print(f"course_lib.tokenizer: cache {cached} is unusable; rebuilding it.")
    atomic_write(cached, train_course_tokenizer().save)
    return _read_tokenizer(cached)
