"""Reference solutions for chapter 14 (dynamic shapes and graph compilation)."""
from __future__ import annotations

import numpy as np


def pad_to_bucket(inputs, labels, buckets, pad_id: int = 0):
    """Right-pad a (B, T) batch to the smallest bucket >= T: inputs with ``pad_id``, labels
    with IGNORE_INDEX (the loss skips them; a causal model's real positions are unchanged).
    A stream then compiles at most len(buckets) graphs."""
    inputs, labels = np.asarray(inputs), np.asarray(labels)
    length = inputs.shape[1]
    fitting = [b for b in sorted(buckets) if b >= length]
    if not fitting:
        raise ValueError(f"Length {length} exceeds the largest bucket {max(buckets)}: add a bigger "
                         "bucket or cut the sequences to max(buckets).")
    extra = fitting[0] - length
    return (np.pad(inputs, ((0, 0), (0, extra)), constant_values=pad_id),
            np.pad(labels, ((0, 0), (0, extra)), constant_values=-100))    # IGNORE_INDEX


def dynamic_inputs(examples, dynamic_axes):
    """Placeholders for ``cell.set_inputs``: one ``Tensor(shape=..., dtype=...)`` per example
    array, with ``None`` on the axes in ``dynamic_axes`` and the example's size elsewhere;
    dtype and rank equal to the real inputs'."""
    from mindspore import Tensor
    out = []
    for x in examples:
        shape = [None if axis in dynamic_axes else int(n) for axis, n in enumerate(np.shape(x))]
        out.append(Tensor(shape=shape, dtype=Tensor(np.asarray(x)).dtype))
    return out


# ---- realistic wrong solutions ----------------------------------------------------------
def wrong_left_pad(inputs, labels, buckets, pad_id=0):
    """Pads on the left: shifts every real token (and changes a causal model's results)."""
    i, l_ = pad_to_bucket(inputs, labels, buckets, pad_id)
    extra = i.shape[1] - np.asarray(inputs).shape[1]
    return np.roll(i, extra, axis=1), np.roll(l_, extra, axis=1)


def wrong_label_pad_id(inputs, labels, buckets, pad_id=0):
    """Pads the labels with pad_id: the loss then trains the model to predict padding."""
    i, l_ = pad_to_bucket(inputs, labels, buckets, pad_id)
    l_[:, np.asarray(labels).shape[1]:] = pad_id
    return i, l_


def wrong_strict_bucket(inputs, labels, buckets, pad_id=0):
    """Uses the first bucket strictly LONGER than the batch (a length equal to a bucket
    jumps to the next one, and the largest bucket can never be used)."""
    length = np.asarray(inputs).shape[1]
    return pad_to_bucket(inputs, labels, [b for b in buckets if b > length] or [length - 1], pad_id)


def wrong_fixed_shape(examples, dynamic_axes):
    """Declares the example's exact shape: every new length compiles again."""
    return dynamic_inputs(examples, ())


def wrong_float32(examples, dynamic_axes):
    """Right shape, but every placeholder float32 whatever the real dtype."""
    import mindspore as ms
    from mindspore import Tensor
    return [Tensor(shape=list(t.shape), dtype=ms.float32) for t in dynamic_inputs(examples, dynamic_axes)]


def wrong_batch_axis(examples, dynamic_axes):
    """Marks axis 0 (the batch) as dynamic instead of the requested axes."""
    return dynamic_inputs(examples, (0,))


def wrong_length_axis_always(examples, dynamic_axes):
    """Ignores ``dynamic_axes`` and always makes axis 1 (the length) dynamic."""
    return dynamic_inputs(examples, (1,))
