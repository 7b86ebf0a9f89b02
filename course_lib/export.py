"""Deploying a (merged) language model: MINDIR export, loading, checking, serving.

    info = export_mindir(model, (batch, seq_len), cl.cache_dir("export") / "lm")
    lm = load_mindir(info.path)                 # nn.GraphCell(ms.load(path)) + shape checks
    max_abs_diff(model, lm, ids)                # 0.0 on CPU: the same computation
    classify = SentimentPipeline(lm, tok, max_len=seq_len)
    classify("房间很干净") -> "正面"

MINDIR is MindSpore's serialized *graph*: operators and weights in one file, no Python
class needed to run it (``mindspore-lite`` or MindSpore Serving can load it too).
``export_mindir`` exports for one static input shape (its example input is a static
Tensor); ``ExportedLM`` remembers it (in a small JSON file next to the .mindir) and refuses
other shapes with a clear message instead of a deep Reshape error. (A MINDIR can also have
dynamic dimensions: ``ms.export`` with an example ``Tensor(shape=[None, seq_len], ...)``;
``mindir_inputs`` reads what a file records, -1 for a dynamic dimension.)
"""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import mindspore as ms
import numpy as np
from mindspore import Tensor, nn
from mindspore.train import Model

from .data import LABELS
from .sft import answer_logprobs
from .safeio import atomic_write, write_text_atomic

EXPORT_FORMAT = "course_lib.export/1"


@dataclass(frozen=True)
class ExportInfo:
    path: Path
    input_shape: tuple[int, int]
    bytes: int
    parameter_bytes: int       # the weights alone, in the dtypes they are stored in

    def __str__(self) -> str:
        return (f"{self.path.name}: input int32 {self.input_shape}, {self.bytes / 2**20:.1f} MiB "
                f"(its weights alone, as stored: {self.parameter_bytes / 2**20:.1f} MiB)")


def _meta_path(path: Path) -> Path:
    return path.with_suffix(".json")


def weights_kib(model) -> float:
    """What ``mindspore.train.serialization._save_together`` compares with ``TOTAL_SAVE``
    when ``ms.export`` writes a MINDIR: ``sys.getsizeof`` of each parameter's bytes / 1024."""
    return sum((int(p.nbytes) + sys.getsizeof(b"")) / 1024 for p in model.get_parameters())


def _check_fits_one_file(model) -> None:
    """Refuse, before writing anything, a model whose weights MindSpore would not keep in the
    .mindir: past ``TOTAL_SAVE`` KiB (1 GiB) of ``weights_kib`` it writes them into a
    ``<name>_variables/`` folder instead, which this module's one-file save and
    ``load_mindir`` do not carry."""
    from mindspore.train import serialization
    kib = weights_kib(model)
    if kib > serialization.TOTAL_SAVE:
        dtypes = sorted({str(p.dtype) for p in model.get_parameters()})
        raise ValueError(
            f"The model's weights are {kib / 2**20:.2f} GiB ({', '.join(dtypes)}): above MindSpore's "
            f"{serialization.TOTAL_SAVE / 2**20:.0f} GiB one-file limit, ms.export would write them into "
            "a separate <name>_variables/ folder, which export_mindir/load_mindir do not handle. "
            "Cast the weights to float16 first (own_model.cast_parameters) if that brings them under "
            "the limit; otherwise call ms.export yourself and keep that folder next to the .mindir.")


def export_mindir(model, input_shape: tuple[int, int], path) -> ExportInfo:
    """Export ``model`` (``input_ids`` int32 (batch, seq_len) -> logits) to ``<path>.mindir``.

    The model is put in inference mode first (dropout off). ``path`` may end in
    ``.mindir`` or not (``ms.export`` appends it)."""
    shape = tuple(int(d) for d in input_shape)
    if len(shape) != 2 or min(shape) < 1:
        raise ValueError(f"input_shape must be (batch, seq_len) of positive ints, got {input_shape!r}.")
    max_len = getattr(getattr(model, "config", None), "max_seq_len", None)
    if max_len is not None and shape[1] > max_len:
        raise ValueError(f"seq_len {shape[1]} exceeds the model's max_seq_len {max_len}.")
    _check_fits_one_file(model)
    path = Path(path)
    if path.suffix == ".mindir":
        path = path.with_suffix("")
    path.parent.mkdir(parents=True, exist_ok=True)
    model.set_train(False)
    file = path.with_suffix(".mindir")
    # Atomic: a killed or failed export leaves the previous .mindir (if any) whole.
    # ms.export appends ".mindir" to file_name, so the temp name is given without it.
    atomic_write(file, lambda tmp: ms.export(model, Tensor(np.zeros(shape, np.int32)),
                                             file_name=str(tmp.with_suffix("")),
                                             file_format="MINDIR"))
    vocab = getattr(getattr(model, "config", None), "vocab_size", None)
    write_text_atomic(_meta_path(file), json.dumps({"format": EXPORT_FORMAT, "input_shape": shape,
                                                    "input_dtype": "int32", "vocab_size": vocab}))
    params = sum(int(p.nbytes) for p in model.get_parameters())
    return ExportInfo(file, shape, file.stat().st_size, params)


def mindir_inputs(path) -> list[tuple[tuple[int, ...], str]]:
    """``[(shape, dtype), ...]`` of the inputs a MINDIR file itself records, read from its
    protobuf (``mindspore.train.mind_ir_pb2``, the format ``ms.export`` writes): what the
    graph was traced with, whatever any sidecar file says. A dimension exported as dynamic
    (an example input ``Tensor(shape=[None, ...])``) reads -1."""
    from mindspore.train import mind_ir_pb2
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"No MINDIR file at {path}.")
    proto = mind_ir_pb2.ModelProto()
    try:
        proto.ParseFromString(path.read_bytes())
    except Exception as err:      # protobuf's DecodeError
        raise ValueError(f"{path} is not a MINDIR file ({err}).") from err
    dtype_name = mind_ir_pb2.TensorProto.DataType.Name
    return [(tuple(int(d) for d in item.tensor[0].dims), dtype_name(item.tensor[0].data_type).lower())
            for item in proto.graph.input]


class ExportedLM:
    """A loaded MINDIR graph (``nn.GraphCell``) with the input shape it was exported for.

    ``lm(input_ids)`` runs the graph directly; ``lm.predict(input_ids)`` goes through
    ``mindspore.train.Model.predict`` (the high-level inference API)."""

    def __init__(self, graph, input_shape: tuple[int, int], path: Path | None = None):
        self.graph = graph
        self.input_shape = tuple(input_shape)
        self.path = path
        self.runner = Model(graph)

    def _check(self, input_ids):
        shape = tuple(input_ids.shape)
        if shape != self.input_shape:
            raise ValueError(f"This MINDIR graph was exported for input shape {self.input_shape}, "
                             f"got {shape}: pad/split the batch to that shape (or export again "
                             "with the shape you need).")
        if str(input_ids.dtype) not in ("Int32", "int32"):
            raise TypeError(f"input_ids must be int32, got {input_ids.dtype}.")

    def __call__(self, input_ids):
        self._check(input_ids)
        return self.graph(input_ids)

    def predict(self, input_ids):
        self._check(input_ids)
        return self.runner.predict(input_ids)


def load_mindir(path) -> ExportedLM:
    """``nn.GraphCell(ms.load(path))`` with clear errors for a missing or broken file."""
    path = Path(path)
    if path.suffix != ".mindir":
        path = path.with_suffix(".mindir")
    if not path.is_file():
        raise FileNotFoundError(f"No MINDIR file at {path}; create it with export_mindir(...).")
    meta_file = _meta_path(path)
    if not meta_file.is_file():
        raise FileNotFoundError(f"{meta_file} (the input shape of {path.name}) is missing; "
                                "export again with export_mindir.")
    meta = json.loads(meta_file.read_text())
    try:
        graph = nn.GraphCell(ms.load(str(path)))
    except (RuntimeError, ValueError) as err:
        raise ValueError(f"{path} could not be loaded as a MINDIR graph ({str(err).splitlines()[0]}); "
                         "the file may be truncated — export it again.") from err
    return ExportedLM(graph, tuple(meta["input_shape"]), path)


def max_abs_diff(live, exported, input_ids) -> float:
    """Largest |live(x) - exported(x)| over all logits (0.0 means bit-identical)."""
    live.set_train(False)
    a = live(input_ids).asnumpy().astype(np.float64)
    b = exported(input_ids).asnumpy().astype(np.float64)
    if a.shape != b.shape:
        raise ValueError(f"Output shapes differ: live {a.shape} vs exported {b.shape}.")
    return float(np.abs(a - b).max())


class SentimentPipeline:
    """``pipeline(text) -> "正面" | "负面"`` on top of an exported (or live) LM.

    Each text becomes the two candidate exchanges of ``course_lib.sft`` (same prompt,
    answers 负面 / 正面); the graph scores both and the likelier answer wins. Batches are
    padded to the exported shape, so any number of texts works."""

    def __init__(self, lm, tokenizer, max_len: int | None = None, batch_size: int | None = None,
                 use_model_predict: bool = True):
        self.lm, self.tokenizer = lm, tokenizer
        shape = getattr(lm, "input_shape", None)
        if shape is not None:
            if max_len not in (None, shape[1]) or batch_size not in (None, shape[0]):
                raise ValueError(f"The exported graph takes input shape {shape}; max_len/batch_size "
                                 "must match it (or be left out).")
            batch_size, max_len = shape
        if max_len is None or batch_size is None:
            raise ValueError("A live model needs max_len and batch_size.")
        self.max_len, self.batch_size = int(max_len), int(batch_size)
        self._forward = lm.predict if (use_model_predict and hasattr(lm, "predict")) else lm

    def scores(self, texts: Sequence[str]) -> np.ndarray:
        """(N, 2) log-probabilities of the answers (负面, 正面)."""
        return answer_logprobs(self._forward, self.tokenizer, list(texts), self.max_len,
                               self.batch_size, fixed_batch=True)

    def __call__(self, texts):
        single = isinstance(texts, str)
        labels = self.scores([texts] if single else texts).argmax(-1)
        answers = [LABELS[i] for i in labels]
        return answers[0] if single else answers
