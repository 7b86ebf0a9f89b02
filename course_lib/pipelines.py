"""Token streams -> ``mindspore.dataset`` pipelines for language modelling.

The sources are *random-access* (``__getitem__`` + ``__len__``), not generator
functions: that is what lets ``GeneratorDataset`` shuffle with a seed and shard across
data-parallel ranks (``num_shards``/``shard_id``).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

IGNORE_INDEX = -100  # label value the course's losses skip


def pack_blocks(docs_ids: Sequence[Sequence[int]], block_size: int, eos_id: int | None = None,
                drop_last: bool = True) -> np.ndarray:
    """Concatenate documents (each followed by ``eos_id``) and cut the stream into rows of
    ``block_size + 1`` tokens: row[:-1] is the input, row[1:] the target. Packing wastes no
    compute on padding, the standard for pre-training."""
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    stream: list[int] = []
    for ids in docs_ids:
        stream.extend(int(i) for i in ids)
        if eos_id is not None:
            stream.append(int(eos_id))
    row = block_size + 1
    n = len(stream) // row
    if n == 0 and drop_last:
        raise ValueError(f"Only {len(stream)} tokens: not enough for one block of {row}. "
                         "Use more text or a smaller block_size.")
    if not drop_last and len(stream) % row:
        n += 1
        stream.extend([eos_id if eos_id is not None else 0] * (n * row - len(stream)))
    return np.asarray(stream[: n * row], dtype=np.int32).reshape(n, row)


class BlockSource:
    """Random-access source yielding ``(input_ids, labels)`` from packed rows."""

    def __init__(self, blocks: np.ndarray):
        blocks = np.asarray(blocks)
        if blocks.ndim != 2 or blocks.shape[1] < 2:
            raise ValueError(f"blocks must be 2-D with rows of >= 2 tokens, got shape {blocks.shape}")
        if len(blocks) == 0:
            raise ValueError("blocks is empty: nothing to train on.")
        self.blocks = blocks.astype(np.int32)

    def __len__(self):
        return len(self.blocks)

    def __getitem__(self, i):
        row = self.blocks[i]
        return row[:-1], row[1:]


class PairSource:
    """Random-access source over equal-length ``(input_ids, labels)`` arrays (e.g. SFT)."""

    def __init__(self, inputs: np.ndarray, labels: np.ndarray):
        inputs, labels = np.asarray(inputs, np.int32), np.asarray(labels, np.int32)
        if inputs.shape != labels.shape or inputs.ndim != 2:
            raise ValueError(f"inputs {inputs.shape} and labels {labels.shape} must be equal 2-D shapes")
        if len(inputs) == 0:
            raise ValueError("no examples: nothing to train on.")
        self.inputs, self.labels = inputs, labels

    def __len__(self):
        return len(self.inputs)

    def __getitem__(self, i):
        return self.inputs[i], self.labels[i]


def make_dataset(source, batch_size: int, shuffle: bool = True, seed: int = 0,
                 num_shards: int | None = None, shard_id: int | None = None,
                 drop_remainder: bool = True):
    """A batched ``GeneratorDataset`` with columns ``input_ids``, ``labels``."""
    import mindspore.dataset as ds
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if len(source) < batch_size and drop_remainder:
        raise ValueError(f"The source has {len(source)} examples, fewer than one batch of "
                         f"{batch_size}; lower batch_size or add data.")
    if shuffle:
        ds.config.set_seed(seed)
    dataset = ds.GeneratorDataset(source, column_names=["input_ids", "labels"],
                                  shuffle=shuffle, num_shards=num_shards, shard_id=shard_id)
    return dataset.batch(batch_size, drop_remainder=drop_remainder)


def lm_dataset(texts: Sequence[str], tokenizer, block_size: int, batch_size: int,
               shuffle: bool = True, seed: int = 0, max_blocks: int | None = None, **shard):
    """Texts -> tokens -> packed blocks -> batched dataset, in one call."""
    blocks = pack_blocks(tokenizer.encode_batch(list(texts)), block_size, tokenizer.eos_id)
    if max_blocks is not None:
        blocks = blocks[:max_blocks]
    return make_dataset(BlockSource(blocks), batch_size, shuffle=shuffle, seed=seed, **shard)
