"""The real tokenizers of Baichuan and InternLM: SentencePiece ``tokenizer.model`` + the
repo's ``tokenizer_config.json``, with the special tokens of each family.

Both repos ship a ``tokenizer.model`` read by a ``PreTrainedTokenizer`` subclass whose
``_tokenize`` is ``sp_model.encode(text, out_type=str)`` and whose
``build_inputs_with_special_tokens`` prepends ``<s>`` when ``add_bos_token`` (default
``True`` in both ``tokenization_baichuan.BaichuanTokenizer`` and
``tokenization_internlm.InternLMTokenizer``; the directory's ``tokenizer_config.json`` may
override it) — sources: InternLM/InternLM ``tools/transformers/tokenization_internlm.py``;
Baichuan's ``tokenization_baichuan.py`` as vendored in DSXiangLi/LongBaichuan. So
``encode(text) = [1] * add_bos + sp.encode(text)``: what this module does, without the
``transformers`` machinery (and without ``trust_remote_code``).

Special ids: ``<unk>`` 0, ``<s>`` 1, ``</s>`` 2 in both. Baichuan-13B-Chat's
``generation_config.json``: ``user_token_id`` 195 (``<reserved_102>``),
``assistant_token_id`` 196 (``<reserved_103>``). InternLM-chat: ``<eoh>`` 103027 (end of
human turn), ``<eoa>`` 103028 (end of answer) — pieces of its ``tokenizer.model``.

Decoding is **streaming-safe**: a Chinese character is 3 UTF-8 bytes and byte-fallback
tokens (``<0xE4>``...) can split it over several tokens; ``StreamDecoder`` only releases
text once the bytes form complete characters.
"""
from __future__ import annotations

import json
from pathlib import Path

TOKENIZER_FILE = "tokenizer.model"


class SentencePieceTokenizer:
    """``encode``/``decode`` exactly like the repos' slow tokenizers (see module docstring)."""

    def __init__(self, model_file, add_bos: bool = True, add_eos: bool = False):
        import sentencepiece as spm
        model_file = Path(model_file)
        if not model_file.is_file():
            raise FileNotFoundError(f"No {model_file.name} at {model_file.parent}: copy the "
                                    "tokenizer files of the model repo next to config.json.")
        try:
            self.sp = spm.SentencePieceProcessor(model_file=str(model_file))
        except (RuntimeError, OSError) as e:
            raise ValueError(f"{model_file} is not a SentencePiece model ({e}); re-download "
                             "tokenizer.model.") from None
        self.add_bos, self.add_eos = add_bos, add_eos
        self.unk_id, self.bos_id, self.eos_id = self.sp.unk_id(), self.sp.bos_id(), self.sp.eos_id()

    @property
    def vocab_size(self) -> int:
        return self.sp.get_piece_size()

    def token_to_id(self, piece: str) -> int:
        i = self.sp.piece_to_id(piece)
        if i == self.unk_id and piece != self.sp.id_to_piece(self.unk_id):
            raise KeyError(f"{piece!r} is not a piece of this tokenizer.model.")
        return i

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        ids = list(self.sp.encode(text))
        if add_special_tokens:
            ids = [self.bos_id] * self.add_bos + ids + [self.eos_id] * self.add_eos
        return ids

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        ids = [int(i) for i in ids]
        if skip_special_tokens:
            ids = [i for i in ids if not self.is_special(i)]
        return self.sp.decode(ids)

    def is_special(self, i: int) -> bool:
        return self.sp.is_control(i) or self.sp.is_unknown(i) or self.sp.is_unused(i)

    def stream(self) -> "StreamDecoder":
        return StreamDecoder(self)


class StreamDecoder:
    """Feed token ids one by one; get back only the text that is complete. Bytes of a
    character split over several byte-fallback tokens are held back (SentencePiece decodes
    an incomplete sequence to U+FFFD) until the character is whole."""

    def __init__(self, tokenizer: SentencePieceTokenizer):
        self.tokenizer, self.ids, self.emitted = tokenizer, [], 0

    def put(self, token_id: int) -> str:
        self.ids.append(int(token_id))
        text = self.tokenizer.decode(self.ids)
        if text.endswith("\ufffd"):
            return ""                              # wait for the rest of the character
        new, self.emitted = text[self.emitted:], len(text)
        return new

    def text(self) -> str:
        return self.tokenizer.decode(self.ids)


def load_hf_tokenizer(path) -> SentencePieceTokenizer:
    """The tokenizer of a model directory (``tokenizer.model`` + ``tokenizer_config.json``),
    with its special tokens: ``add_bos_token``/``add_eos_token`` from the config file, else
    the defaults of the repos' tokenizer classes (``True``/``False``)."""
    path = Path(path)
    model_file = path / TOKENIZER_FILE if path.is_dir() else path
    cfg_file = model_file.parent / "tokenizer_config.json"
    cfg = json.loads(cfg_file.read_text()) if cfg_file.exists() else {}
    return SentencePieceTokenizer(model_file, add_bos=bool(cfg.get("add_bos_token", True)),
                                  add_eos=bool(cfg.get("add_eos_token", False)))
