"""Input checks shared by the course's entry points: every bad input gets an error that
says what is wrong and what to do, before MindSpore fails deep inside (or, worse, returns
a wrong number without complaint).

The checks run in Python, so they sit where Python runs: ``setup``, the trainer's batches,
``generate``, configs, and ``TokenEmbedding.__call__`` (PyNative). Inside a GRAPH-compiled
step only shape/dtype (compile-time) checks are possible; there
:func:`guard_token_ids` makes a negative id an out-of-range error instead of a silent wrap.
"""
from __future__ import annotations

import functools
import math
import numbers

import mindspore as ms
import numpy as np
from mindspore import ops

INT_DTYPES = ("Int8", "Int16", "Int32", "Int64", "UInt8")


def is_int(value) -> bool:
    """A Python or NumPy integer, and not a bool (True is an int to Python, never a count)."""
    return isinstance(value, (numbers.Integral, np.integer)) and not isinstance(value, bool)


def check_setup_args(device, mode, seed, quiet, modes) -> None:
    """All of ``setup``'s arguments, before it switches anything."""
    if device is not None and not isinstance(device, str):
        raise TypeError(f"device must be a str such as 'CPU' (or None for the best available), "
                        f"got {type(device).__name__} {device!r}.")
    if mode not in modes:
        raise ValueError(f"Unknown mode {mode!r}; use 'pynative' or 'graph'.")
    if not is_int(seed) or seed < 0:
        raise TypeError(f"seed must be a non-negative int, got {type(seed).__name__} {seed!r}; "
                        "e.g. setup(seed=42).")
    if not isinstance(quiet, bool):
        raise TypeError(f"quiet must be True or False, got {quiet!r}.")


def check_positive_number(name: str, value, what: str = "") -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not (
            math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}{what}.")


def check_decoder_config(config) -> None:
    """Values a dataclass field type does not enforce (a NaN model is the symptom)."""
    check_positive_number("rope_base", config.rope_base, " (RoPE divides by rope_base ** "
                          "(2i/d); the usual value is 10000.0)")
    check_positive_number("rms_norm_eps", config.rms_norm_eps, " (it keeps RMSNorm from "
                          "dividing by zero; the usual value is 1e-6)")
    if isinstance(config.init_std, bool) or not isinstance(config.init_std, numbers.Real) or not (
            math.isfinite(config.init_std) and config.init_std >= 0):
        raise ValueError(f"init_std must be a finite number >= 0, got {config.init_std!r}.")


def _ids_array(ids, what: str) -> np.ndarray:
    """A NumPy view of token ids (Tensor, NumPy or nested lists), integers only."""
    if hasattr(ids, "asnumpy"):
        array = ids.asnumpy()
    else:
        try:
            array = np.asarray(ids)
        except ValueError as err:  # ragged lists
            raise ValueError(f"{what} must be rectangular (every row the same length); pad "
                             "them or pass a list of lists to generate().") from err
    if array.dtype == bool or not np.issubdtype(array.dtype, np.integer):
        if array.dtype.kind == "f" and array.size and np.all(array == np.round(array)):
            hint = " (they are whole numbers: cast with .astype(int32))"
        else:
            hint = ""
        raise TypeError(f"{what} must be integers, got dtype {array.dtype}{hint}; token ids "
                        "come from tokenizer.encode and index the embedding table.")
    return array


def check_token_ids(ids, vocab_size: int, what: str = "token ids") -> np.ndarray:
    """Integer ids in ``[0, vocab_size)``; negative ids would wrap to the END of the table."""
    array = _ids_array(ids, what)
    if array.size:
        low, high = int(array.min()), int(array.max())
        if low < 0:
            raise ValueError(f"{what} contain a negative id ({low}); ids must be in [0, "
                             f"{vocab_size}). -100 is only allowed in labels (ignored positions), "
                             "never in input_ids.")
        if high >= vocab_size:
            raise ValueError(f"{what} contain id {high} but the model's vocabulary has "
                             f"{vocab_size} entries (ids 0..{vocab_size - 1}): the tokenizer and "
                             "the model's vocab_size differ; build the model with "
                             "vocab_size=tokenizer.vocab_size.")
    return array


def check_labels(labels, vocab_size: int, ignore_index: int = -100) -> np.ndarray:
    """Labels in ``[0, vocab_size)`` or exactly ``ignore_index``: any other negative value
    would be scored as a real class (wrapped), not ignored."""
    array = _ids_array(labels, "labels")
    bad = array[(array != ignore_index) & ((array < 0) | (array >= vocab_size))]
    if bad.size:
        raise ValueError(f"labels contain {int(bad[0])}: a label must be a token id in [0, "
                         f"{vocab_size}) or exactly {ignore_index} (= ignore this position). "
                         f"Replace other markers with {ignore_index}.")
    return array


def checked_token_call(call):
    """Wrap ``nn.Cell.__call__`` of an embedding or a causal LM (``vocab_size`` or
    ``config.vocab_size``): a direct call checks the ids first. Inside a compiled step the
    sub-cell's ``construct`` runs directly (see :func:`guard_token_ids`)."""
    @functools.wraps(call)
    def __call__(self, input_ids, *args, **kwargs):
        if isinstance(input_ids, (list, tuple, np.ndarray)) or np.isscalar(input_ids):
            raise TypeError(f"input_ids must be a mindspore Tensor, got "
                            f"{type(input_ids).__name__}: wrap it as "
                            "Tensor(np.asarray(ids, np.int32)).")
        vocab = getattr(self, "vocab_size", None) or self.config.vocab_size
        if hasattr(input_ids, "asnumpy"):
            check_token_ids(input_ids, vocab, "input_ids")
        if isinstance(kwargs.get("attention_mask"), (list, tuple)):   # NumPy/Tensor work
            kwargs["attention_mask"] = np.asarray(kwargs["attention_mask"], np.int32)
        if args and isinstance(args[0], (list, tuple)):
            args = (np.asarray(args[0], np.int32),) + args[1:]
        return call(self, input_ids, *args, **kwargs)
    return __call__


def guard_token_ids(input_ids, vocab_size):
    """Inside ``construct`` (GRAPH-safe: ops only): a float dtype is a compile-time error,
    a negative id becomes ``vocab_size`` so that Gather reports it as out of range instead
    of silently reading row ``vocab_size + id``."""
    if input_ids.dtype not in (ms.int32, ms.int64, ms.int16, ms.int8, ms.uint8):
        raise TypeError("input_ids must be integers (token ids); cast them with "
                        "ids.astype(mindspore.int32)")
    return ops.where(input_ids < 0, vocab_size, input_ids)


def check_generate_args(model, prompts_ids, temperature=1.0, do_sample=False, **_ignored):
    """``generate``'s inputs: ids are integers inside the model's vocabulary; the decoding
    switches are consistent."""
    if not do_sample and isinstance(temperature, numbers.Real) and temperature <= 0:
        raise ValueError(f"temperature={temperature} with do_sample=False: greedy decoding "
                         "ignores temperature, so leave it at 1.0 (or drop the argument); "
                         "for sampling use do_sample=True with a temperature > 0.")
    if not isinstance(do_sample, (bool, np.bool_)):
        raise TypeError(f"do_sample must be True or False, got {do_sample!r}.")
    vocab = getattr(getattr(model, "config", None), "vocab_size", None)
    rows = prompts_ids.tolist() if isinstance(prompts_ids, np.ndarray) else prompts_ids
    if hasattr(rows, "asnumpy"):
        raise TypeError("prompts_ids must be a list of token-id lists (e.g. "
                        "[tok.encode('人民日报')]), got a Tensor: use ids.asnumpy().tolist().")
    if isinstance(rows, (list, tuple)) and vocab is not None:
        for row in rows:
            if isinstance(row, (list, tuple, np.ndarray)) and len(row):
                check_token_ids(np.asarray(row), vocab, "prompt token ids")


def check_batch(input_ids, labels, vocab_size: int, ignore_index: int = -100) -> None:
    """One training batch from the data pipeline (host-side, before the compiled step)."""
    check_token_ids(input_ids, vocab_size, "input_ids of a training batch")
    check_labels(labels, vocab_size, ignore_index)


def model_vocab_size(model) -> int | None:
    """The vocabulary size of a course model (config or its token embedding)."""
    vocab = getattr(getattr(model, "config", None), "vocab_size", None)
    if vocab is not None:
        return int(vocab)
    for _, cell in model.cells_and_names():
        if type(cell).__name__ == "TokenEmbedding":
            return int(cell.vocab_size)
    return None


def check_learning_rate(lr) -> None:
    """lr > 1 is almost always a typo (3e-3 written 3e3): AdamW then moves every weight by
    ~lr per step and the model dies (loss stuck at ln(vocab))."""
    if isinstance(lr, bool) or not isinstance(lr, numbers.Real) or not math.isfinite(lr) or lr <= 0:
        raise ValueError(f"lr must be a finite number > 0, got {lr!r}.")
    if lr > 1.0:
        raise ValueError(f"lr={lr} is far too large for AdamW (each step moves every weight by "
                         "about lr): the model would diverge or die (loss stuck at "
                         "ln(vocab_size)). Typical values are 1e-4 .. 3e-3.")
