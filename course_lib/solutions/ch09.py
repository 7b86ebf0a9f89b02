"""Reference solutions of chapter 09's code exercises (merge, export), and the realistic
wrong versions the self-test feeds to the checkers.

Load one after trying: ``from course_lib.check import show_solution; show_solution("ch09.fold_lora")``.
"""
from __future__ import annotations

import numpy as np


# ------------------------------------------------------------------ 1. fold the adapter into W
def fold_lora(W, A, B, alpha, r):
    """W' = W + (B @ A) * alpha / r: the plain Dense weight (out, in) that computes what the
    LoRA layer computes (A: (r, in), B: (out, r))."""
    W, A, B = (np.asarray(t, np.float64) for t in (W, A, B))
    return W + (B @ A) * (alpha / r)


def wrong_fold_no_scaling(W, A, B, alpha, r):
    return np.asarray(W) + np.asarray(B) @ np.asarray(A)


def wrong_fold_transposed(W, A, B, alpha, r):
    """Works in the (in, out) layout of x @ W: returns the transpose of the weight."""
    W, A, B = (np.asarray(t, np.float64) for t in (W, A, B))
    return W.T + (A.T @ B.T) * (alpha / r)


def wrong_fold_inverted(W, A, B, alpha, r):
    """Scales by r / alpha instead of alpha / r."""
    W, A, B = (np.asarray(t, np.float64) for t in (W, A, B))
    return W + (B @ A) * (r / alpha)


def wrong_fold_delta_only(W, A, B, alpha, r):
    """Returns the update without the base weight."""
    return (np.asarray(B) @ np.asarray(A)) * (alpha / r)


# ------------------------------------------------------------------ 2. export a MINDIR
def export_for_serving(net, path, batch_size, seq_len):
    """Export ``net`` (int32 token ids (batch, seq) -> logits) as ``<path>.mindir`` for a
    fixed input shape: inference mode first (dropout off), then ``ms.export`` with a
    dummy input of exactly the shape and dtype the server will send."""
    import mindspore as ms
    from mindspore import Tensor
    net.set_train(False)
    dummy = Tensor(np.zeros((batch_size, seq_len), np.int32))
    ms.export(net, dummy, file_name=str(path), file_format="MINDIR")


def wrong_export_training_mode(net, path, batch_size, seq_len):
    """Exports in training mode: dropout is baked into the graph."""
    import mindspore as ms
    from mindspore import Tensor
    net.set_train(True)
    ms.export(net, Tensor(np.zeros((batch_size, seq_len), np.int32)), file_name=str(path),
              file_format="MINDIR")


def wrong_export_swapped_shape(net, path, batch_size, seq_len):
    """The dummy input has shape (seq_len, batch_size)."""
    import mindspore as ms
    from mindspore import Tensor
    net.set_train(False)
    ms.export(net, Tensor(np.zeros((seq_len, batch_size), np.int32)), file_name=str(path),
              file_format="MINDIR")


def wrong_export_int64(net, path, batch_size, seq_len):
    """The dummy input is int64 (NumPy's default integer): the graph records an int64 input."""
    import mindspore as ms
    from mindspore import Tensor
    net.set_train(False)
    ms.export(net, Tensor(np.zeros((batch_size, seq_len), np.int64)), file_name=str(path),
              file_format="MINDIR")
