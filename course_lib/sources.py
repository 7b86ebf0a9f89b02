"""Data sources and length statistics for chapter 03 (``mindspore.dataset``).

* :class:`ExampleSource`: a *random-access* source (``__getitem__`` + ``__len__``) over a
  list of tuples. ``GeneratorDataset`` can shuffle and shard it; over a plain generator
  *function* it can do neither (``shuffle=True`` is silently ignored, ``num_shards`` raises).
* Writers that prepare the three on-disk formats the chapter reads back with MindSpore's
  own readers: :func:`write_csv` (-> ``CSVDataset``), :func:`write_mindrecord`
  (``FileWriter`` -> ``MindDataset``), :func:`make_image_folder` (-> ``ImageFolderDataset``).
* :func:`token_lengths`, :func:`length_stats`, :func:`padding_fraction`,
  :func:`plot_length_histogram`: how long are the sequences, and what does padding cost.

Files are written only where the caller says (the notebooks use ``cl.cache_dir(...)``).
MindSpore reports an empty source as "Syntax error ... data row of input source must not
be 0"; every helper here refuses empty input first, with a message that says what to do.
"""
from __future__ import annotations

import csv
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from .safeio import atomic_write

IMAGE_CLASSES = ("circle", "square", "triangle")


def require_nonempty(items, what: str = "examples") -> None:
    """Raise a clear ValueError for an empty list/array (instead of MindSpore's
    'Syntax error ... data row of input source must not be 0' at iteration time)."""
    if items is None or len(items) == 0:
        raise ValueError(f"No {what}: a dataset built from it would be empty. Check the "
                         "filter/split that produced it, or pass at least one item.")


class ExampleSource:
    """Random-access source over ``[(field0, field1, ...), ...]`` for ``GeneratorDataset``.

    Each item is returned as a tuple of NumPy values (strings become NumPy str scalars,
    integers int32), one per column name given to ``GeneratorDataset``.
    """

    def __init__(self, examples: Sequence[tuple]):
        require_nonempty(examples)
        widths = {len(e) if isinstance(e, (tuple, list)) else 1 for e in examples}
        if len(widths) != 1:
            raise ValueError(f"Every example must have the same number of fields, got {sorted(widths)}.")
        self.examples = [tuple(e) if isinstance(e, (tuple, list)) else (e,) for e in examples]

    def __len__(self):
        return len(self.examples)

    def __getitem__(self, index):
        return tuple(np.array(v, dtype=np.int32) if isinstance(v, (int, np.integer)) else np.array(v)
                     for v in self.examples[index])


# --- writers ---------------------------------------------------------------------------


def write_csv(path, rows: Iterable[Sequence], header: Sequence[str] = ("text", "label")) -> Path:
    """Write ``rows`` under a header line with proper CSV quoting (texts may contain commas
    and quotes). Read back with ``ds.CSVDataset(path, column_defaults=[...])`` *without*
    ``column_names`` so the header names the columns (with ``column_names`` the header
    line would be parsed as data)."""
    rows = [tuple(r) for r in rows]
    require_nonempty(rows, "rows to write")
    bad = [r for r in rows if len(r) != len(header)]
    if bad:
        raise ValueError(f"Each row needs {len(header)} fields {tuple(header)}, e.g. got {bad[0]!r}.")
    def write(tmp: Path) -> None:
        with open(tmp, "w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            writer.writerow(header)
            writer.writerows(rows)
    return atomic_write(path, write)


REVIEW_SCHEMA = {
    "text": {"type": "string"},
    "input_ids": {"type": "int32", "shape": [-1]},  # -1: variable length per record
    "label": {"type": "int32"},
}


def write_mindrecord(path, examples: Sequence[tuple[str, int]], tokenizer,
                     max_len: int | None = None) -> Path:
    """Store reviews as MindRecord: text, token ids (variable length, optionally truncated
    to ``max_len``) and label. Tokenising once, when writing, means every epoch reads ids
    directly. Existing files at ``path`` are replaced (``FileWriter`` refuses to overwrite
    unless told to). Returns the path; the writer also creates ``path + '.db'`` (the index).
    """
    from mindspore.mindrecord import FileWriter
    require_nonempty(examples)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    ids = tokenizer.encode_batch([t for t, _ in examples])
    records = [{"text": t, "input_ids": np.asarray(seq[:max_len] if max_len else seq, np.int32),
                "label": int(y)} for (t, y), seq in zip(examples, ids)]
    writer = FileWriter(str(path), shard_num=1, overwrite=True)
    writer.add_schema(REVIEW_SCHEMA, "course reviews")
    writer.write_raw_data(records)
    writer.commit()
    return path


def _draw_shape(draw, shape: str, rng, size: int):
    margin = size // 8
    lo, hi = sorted(rng.integers(margin, size - margin, 2))
    lo, hi = min(lo, size // 2 - 2), max(hi, size // 2 + 2)   # at least a few pixels wide
    colour = tuple(int(c) for c in rng.integers(60, 256, 3))
    if shape == "circle":
        draw.ellipse([lo, lo, hi, hi], fill=colour)
    elif shape == "square":
        draw.rectangle([lo, lo, hi, hi], fill=colour)
    else:
        draw.polygon([((lo + hi) // 2, lo), (lo, hi), (hi, hi)], fill=colour)


def make_image_folder(root, per_class: int = 20, size: int = 32, seed: int = 0,
                      classes: Sequence[str] = IMAGE_CLASSES) -> dict:
    """Generate ``root/<class>/<i>.png``: coloured circles, squares and triangles on a dark,
    noisy background — a tiny image-classification set laid out the way
    ``ImageFolderDataset`` expects (one sub-folder per class). Deterministic for a seed.
    Returns ``{class: number of images}``."""
    from PIL import Image, ImageDraw
    if per_class < 1 or size < 8:
        raise ValueError(f"need per_class >= 1 and size >= 8, got {per_class}, {size}")
    unknown = set(classes) - set(IMAGE_CLASSES)
    if unknown:
        raise ValueError(f"Unknown shape classes {sorted(unknown)}; choose from {IMAGE_CLASSES}.")
    rng = np.random.default_rng(seed)
    root = Path(root)
    counts = {}
    for shape in classes:
        folder = root / shape
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.glob("*.png"):   # a re-run with fewer images must not keep extras
            old.unlink()
        for i in range(per_class):
            noise = rng.integers(0, 50, (size, size, 3), dtype=np.uint8)
            image = Image.fromarray(noise, "RGB")
            _draw_shape(ImageDraw.Draw(image), shape, rng, size)
            image.save(folder / f"{i:04d}.png")
        counts[shape] = per_class
    return counts


# --- lengths and padding ------------------------------------------------------------------


def token_lengths(texts: Sequence[str], tokenizer) -> np.ndarray:
    """Number of tokens of each text (no BOS/EOS)."""
    require_nonempty(texts, "texts")
    return np.asarray([len(ids) for ids in tokenizer.encode_batch(list(texts))], dtype=np.int64)


def length_stats(lengths, percentiles: Sequence[int] = (50, 90, 95, 99)) -> dict:
    """Count, mean, min, max and percentiles (nearest-rank, so always an observed length)."""
    lengths = np.asarray(lengths)
    require_nonempty(lengths, "lengths")
    ordered = np.sort(lengths)
    stats = {"count": int(len(ordered)), "mean": round(float(ordered.mean()), 2),
             "min": int(ordered[0]), "max": int(ordered[-1])}
    for p in percentiles:
        rank = max(int(np.ceil(p / 100 * len(ordered))), 1)   # nearest-rank definition
        stats[f"p{p}"] = int(ordered[rank - 1])
    return stats


def padding_fraction(lengths, batch_size: int, max_len: int | None = None,
                     sort: bool = False) -> float:
    """Share of the batched token grid that is padding.

    * ``max_len`` given: every sequence is truncated/padded to ``max_len`` (fixed shape).
    * ``max_len=None``: each batch is padded to its own longest sequence (``padded_batch``
      with ``pad_info={col: (None, pad)}``); ``sort=True`` batches similar lengths together
      first (what ``bucket_batch_by_length`` approximates), which wastes the least.
    """
    lengths = np.asarray(lengths)
    require_nonempty(lengths, "lengths")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if max_len is not None:
        kept = np.minimum(lengths, max_len)
        return float(1 - kept.sum() / (len(lengths) * max_len))
    if sort:
        lengths = np.sort(lengths)
    grid = sum(len(chunk) * int(chunk.max())
               for chunk in np.array_split(lengths, range(batch_size, len(lengths), batch_size)))
    return float(1 - lengths.sum() / grid)


def plot_length_histogram(lengths, title: str = "Sequence length (tokens)", cutoff: int | None = None,
                          ax=None, bins: int = 60):
    """Histogram of lengths with the median, p95 and an optional ``cutoff`` (truncation length
    or block size) marked.
    Returns the matplotlib Axes."""
    import matplotlib.pyplot as plt
    stats = length_stats(lengths, (50, 95))
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 3.5))
    clip = stats["p95"] * 2 if cutoff is None else max(cutoff, stats["p95"]) * 1.5
    shown = np.minimum(np.asarray(lengths), clip)   # fold the long tail into the last bin
    ax.hist(shown, bins=bins, color="#4C72B0", alpha=0.85)
    ax.axvline(stats["p50"], color="black", ls="--", label=f"median {stats['p50']}")
    ax.axvline(stats["p95"], color="orange", ls="--", label=f"p95 {stats['p95']}")
    if cutoff is not None:
        ax.axvline(cutoff, color="red", lw=2, label=f"cutoff {cutoff}")
    ax.set_xlabel(f"tokens (values above {int(clip)} drawn in the last bin)")
    ax.set_ylabel("count")
    ax.set_title(title)
    ax.legend()
    ax.figure.tight_layout()
    return ax
