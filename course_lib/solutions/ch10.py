"""Reference solutions for chapter 10 (data parallelism)."""
from __future__ import annotations

import math

import numpy as np


class ShardedSource:
    """Rank ``rank``'s share of a random-access source, as ``GeneratorDataset(num_shards=world,
    shard_id=rank, shuffle=False)`` reads it: items rank, rank + world, rank + 2·world, ...
    Every rank gets ceil(n / world) items (the last ones wrap around to the start), so all
    ranks run the same number of steps and no all-reduce waits for a rank that has finished."""

    def __init__(self, source, rank: int, world: int):
        if not 0 <= rank < world:
            raise ValueError(f"rank must be in [0, {world}), got {rank}")
        self.source, self.rank, self.world = source, rank, world

    def __len__(self):
        return math.ceil(len(self.source) / self.world)

    def __getitem__(self, i):
        if not 0 <= i < len(self):
            raise IndexError(i)
        return self.source[(self.rank + i * self.world) % len(self.source)]


def average_then_clip(rank_grads, max_norm: float):
    """The gradient every rank applies in data parallel: the mean over ranks of each
    parameter's gradient (the all-reduce), THEN clipped by the global norm of that mean."""
    world = len(rank_grads)
    mean = [sum(np.asarray(g[i], np.float64) for g in rank_grads) / world
            for i in range(len(rank_grads[0]))]
    norm = math.sqrt(sum(float((g * g).sum()) for g in mean))
    scale = min(1.0, max_norm / norm) if norm > 0 else 1.0   # ops.clip_by_global_norm's rule
    return [(g * scale).astype(np.float32) for g in mean]


# ---- realistic wrong solutions (the self-test proves the checker names their bug) -------
class wrong_contiguous:  # noqa: N801 - a class, named like the wrong variant it is
    """Contiguous blocks per rank (rank 0: items 0..k-1): not what num_shards reads."""

    def __init__(self, source, rank, world):
        self.source, self.rank, self.world = source, rank, world
        self.per = math.ceil(len(source) / world)

    def __len__(self):
        return self.per

    def __getitem__(self, i):
        return self.source[(self.rank * self.per + i) % len(self.source)]


class wrong_unequal:  # noqa: N801
    """Interleaved, but without padding: ranks get different numbers of items."""

    def __init__(self, source, rank, world):
        self.items = list(range(rank, len(source), world))
        self.source = source

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.source[self.items[i]]


class wrong_no_shard:  # noqa: N801
    """Every rank reads the whole source."""

    def __init__(self, source, rank, world):
        self.source = source

    def __len__(self):
        return len(self.source)

    def __getitem__(self, i):
        return self.source[i]


def wrong_clip_then_average(rank_grads, max_norm):
    """Each rank clips its own gradient, then the clipped gradients are averaged."""
    clipped = [average_then_clip([g], max_norm) for g in rank_grads]
    return [sum(np.asarray(c[i], np.float64) for c in clipped).astype(np.float32) / len(clipped)
            for i in range(len(clipped[0]))]


def wrong_sum(rank_grads, max_norm):
    """gradients_mean=False: the all-reduce sums instead of averaging."""
    world = len(rank_grads)
    return average_then_clip([[np.asarray(x) * world for x in g] for g in rank_grads], max_norm)


def wrong_per_tensor_clip(rank_grads, max_norm):
    """Averages, then clips each tensor by its own norm instead of the global norm."""
    mean = average_then_clip(rank_grads, float("inf"))
    return [average_then_clip([[g]], max_norm)[0] for g in mean]
