"""The real tokenizers of the course's checkpoint families, read from a model directory:
``tokenizer.json`` (Hugging Face ``tokenizers``: byte-level BPE of Qwen2/Qwen2.5/Qwen3 and
Llama-3) or ``tokenizer.model`` (SentencePiece: Baichuan, Baichuan2, InternLM, InternLM2,
Llama-2), with the special tokens named in the directory's ``tokenizer_config.json``.

Which file: ``tokenizer.json`` when present, else ``tokenizer.model`` — what
``transformers``' fast tokenizers do (``PreTrainedTokenizerFast.__init__`` in
``transformers/tokenization_utils_fast.py`` loads ``tokenizer_file`` when it is given and only
converts the slow SentencePiece model when it is not; ``AutoTokenizer`` picks the fast class
by default).

``tokenizer.json``: ``encode`` is ``tokenizers.Tokenizer.encode``; BOS/EOS come from the
file's own post-processor (Llama-3's ``TemplateProcessing`` prepends ``<|begin_of_text|>``,
Qwen's ``ByteLevel`` adds nothing), exactly as ``PreTrainedTokenizerFast`` does — the
``add_bos_token`` key is not consulted for these files. Added tokens written in the text
(``<|im_start|>``...) become their single ids. ``decode`` applies
``clean_up_tokenization_spaces`` when the config asks for it (Llama-3 does, Qwen does not).

``tokenizer.model``: the repos ship a ``PreTrainedTokenizer`` subclass whose ``_tokenize`` is
``sp_model.encode(text, out_type=str)`` and whose ``build_inputs_with_special_tokens``
prepends ``<s>`` when ``add_bos_token`` (default ``True`` in
``tokenization_baichuan.BaichuanTokenizer`` and ``tokenization_internlm.InternLMTokenizer``;
the directory's ``tokenizer_config.json`` may override it — Baichuan2-*-Chat is said to set it
to ``false``, which no public copy of that file confirmed: unverified) — sources: InternLM/InternLM ``tools/transformers/tokenization_internlm.py``;
Baichuan's ``tokenization_baichuan.py`` as vendored in DSXiangLi/LongBaichuan. The base class
first splits the text on the added tokens of ``added_tokens_decoder`` (InternLM2's
``<|im_start|>``...), so this module does the same: each added token is its own id and the
text between them is SentencePiece-encoded piece by piece. So ``encode(text) = [<s>] *
add_bos + ...``, without the ``transformers`` machinery (and without ``trust_remote_code``).

Special ids are never hard-coded: ``bos_id``/``eos_id``/``pad_id`` are the ids of the
config's ``bos_token``/``eos_token``/``pad_token`` (``None`` when the config says ``null``,
as Qwen does for BOS); a SentencePiece model falls back to its own ``<s>``/``</s>``.
Baichuan-13B-Chat's ``<reserved_102>``/``<reserved_103>`` (195/196) and InternLM-chat's
``<eoh>``/``<eoa>`` are pieces of their ``tokenizer.model``.

Decoding is **streaming-safe**: a Chinese character is 3 UTF-8 bytes; SentencePiece
byte-fallback tokens (``<0xE4>``...) and byte-level BPE tokens can both split it over several
tokens, and both decoders turn an incomplete sequence into U+FFFD; ``StreamDecoder`` only
releases text once the bytes form complete characters.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

TOKENIZER_FILE = "tokenizer.model"
TOKENIZER_JSON = "tokenizer.json"
CONFIG_FILE = "tokenizer_config.json"


def _token_name(value):
    """``bos_token`` & co. are a string, an ``AddedToken`` dict or ``null`` in the config."""
    if isinstance(value, dict):
        return value.get("content")
    return value


def _added_tokens(cfg: dict) -> dict[str, tuple[int, bool]]:
    """``{content: (id, special)}`` from the config's ``added_tokens_decoder``."""
    out = {}
    for key, tok in (cfg.get("added_tokens_decoder") or {}).items():
        out[tok["content"]] = (int(key), bool(tok.get("special", False)))
    return out


def _named_id(tokenizer, cfg: dict, key: str, fallback):
    name = _token_name(cfg.get(key)) if key in cfg else None
    if name is None:
        return None if key in cfg else fallback
    try:
        return tokenizer.token_to_id(name)
    except KeyError:
        raise ValueError(f"{CONFIG_FILE} names {key}={name!r}, which is not a token of this "
                         "tokenizer: the tokenizer files come from different repos; "
                         "re-download them together.") from None


def _clean_up_spaces(text: str) -> str:
    """``transformers``' ``clean_up_tokenization``: no space before . ? ! , and English
    contractions (applied only when the config says ``clean_up_tokenization_spaces``)."""
    for old in (" .", " ?", " !", " ,", " ' ", " n't", " 'm", " 's", " 've", " 're"):
        text = text.replace(old, old.lstrip(" ") if old != " ' " else "'")
    return text


class SentencePieceTokenizer:
    """``encode``/``decode`` exactly like the repos' slow tokenizers (see module docstring)."""

    def __init__(self, model_file, add_bos: bool = True, add_eos: bool = False,
                 config: dict | None = None):
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
        cfg = config or {}
        self.add_bos, self.add_eos = add_bos, add_eos
        self.chat_template = cfg.get("chat_template")
        self.added = _added_tokens(cfg)
        self._split = (re.compile("(" + "|".join(re.escape(t) for t in sorted(
            self.added, key=len, reverse=True)) + ")") if self.added else None)
        self.unk_id = self.sp.unk_id()
        self.bos_id = _named_id(self, cfg, "bos_token", self.sp.bos_id())
        self.eos_id = _named_id(self, cfg, "eos_token", self.sp.eos_id())
        self.pad_id = _named_id(self, cfg, "pad_token", None)

    @property
    def vocab_size(self) -> int:
        return max([self.sp.get_piece_size()] + [i + 1 for i, _ in self.added.values()])

    def token_to_id(self, piece: str) -> int:
        if piece in self.added:
            return self.added[piece][0]
        i = self.sp.piece_to_id(piece)
        if i == self.unk_id and piece != self.sp.id_to_piece(self.unk_id):
            raise KeyError(f"{piece!r} is not a piece of this tokenizer.model.")
        return i

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        chunks = self._split.split(text) if self._split else [text]
        ids = []
        for n, chunk in enumerate(chunks):
            if n % 2:                                  # an added token matched by the split
                ids.append(self.added[chunk][0])
            elif chunk:
                ids += self.sp.encode(chunk)
        if add_special_tokens:
            ids = [self.bos_id] * self.add_bos + ids + [self.eos_id] * self.add_eos
        return ids

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        ids = [int(i) for i in ids]
        if skip_special_tokens:
            ids = [i for i in ids if not self.is_special(i)]
        return self.sp.decode(ids)

    def is_special(self, i: int) -> bool:
        i = int(i)
        if any(i == j and special for j, special in self.added.values()):
            return True
        return self.sp.is_control(i) or self.sp.is_unknown(i) or self.sp.is_unused(i)

    def stream(self) -> "StreamDecoder":
        return StreamDecoder(self)


class BPETokenizer:
    """A ``tokenizer.json`` (byte-level BPE of Qwen and Llama-3) through the ``tokenizers``
    library, with the special tokens of ``tokenizer_config.json`` (see module docstring)."""

    def __init__(self, json_file, config: dict | None = None):
        from tokenizers import Tokenizer
        json_file = Path(json_file)
        if not json_file.is_file():
            raise FileNotFoundError(f"No {json_file.name} at {json_file.parent}: copy the "
                                    "tokenizer files of the model repo next to config.json.")
        try:
            self.backend = Tokenizer.from_file(str(json_file))
        except Exception as e:                     # tokenizers raises a bare Exception
            raise ValueError(f"{json_file} is not a tokenizers JSON file ({e}); re-download "
                             "tokenizer.json.") from None
        cfg = config or {}
        self.added = _added_tokens(cfg)
        self.cleanup = bool(cfg.get("clean_up_tokenization_spaces", False))
        self.chat_template = cfg.get("chat_template")
        self.unk_id = _named_id(self, cfg, "unk_token", None)
        self.bos_id = _named_id(self, cfg, "bos_token", None)
        self.eos_id = _named_id(self, cfg, "eos_token", None)
        self.pad_id = _named_id(self, cfg, "pad_token", None)
        self._special = ({i for i, special in self.added.values() if special}
                         | {i for i, t in self.backend.get_added_tokens_decoder().items()
                            if t.special})

    @property
    def vocab_size(self) -> int:
        return self.backend.get_vocab_size(with_added_tokens=True)

    def token_to_id(self, piece: str) -> int:
        i = self.backend.token_to_id(piece)
        if i is None:
            raise KeyError(f"{piece!r} is not a token of this tokenizer.json.")
        return i

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return self.backend.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        text = self.backend.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)
        return _clean_up_spaces(text) if self.cleanup else text

    def is_special(self, i: int) -> bool:
        return int(i) in self._special

    def stream(self) -> "StreamDecoder":
        return StreamDecoder(self)


class StreamDecoder:
    """Feed token ids one by one; get back only the text that is complete. Bytes of a
    character split over several tokens are held back (both SentencePiece and byte-level BPE
    decode an incomplete sequence to U+FFFD) until the character is whole."""

    def __init__(self, tokenizer):
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


def _read_config(directory: Path) -> dict:
    cfg_file = directory / CONFIG_FILE
    if not cfg_file.exists():
        return {}
    try:
        return json.loads(cfg_file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{cfg_file} is not valid JSON ({e}); re-download it from the "
                         "model repo.") from None


def load_hf_tokenizer(path):
    """The tokenizer of a model directory: ``tokenizer.json`` if present (like
    ``transformers``' fast tokenizers), else ``tokenizer.model``; special tokens and
    ``add_bos_token``/``add_eos_token`` from ``tokenizer_config.json`` (defaults of the
    SentencePiece repos' tokenizer classes: ``True``/``False``). ``path`` may also name one
    of the two files."""
    path = Path(path)
    if path.is_dir():
        json_file, model_file = path / TOKENIZER_JSON, path / TOKENIZER_FILE
        directory = path
    else:
        directory = path.parent
        json_file, model_file = ((path, None) if path.name.endswith(".json") else (None, path))
    cfg = _read_config(directory)
    if json_file is not None and (json_file.exists() or model_file is None):
        return BPETokenizer(json_file, cfg)
    if path.is_dir() and not model_file.exists():
        raise FileNotFoundError(f"No {TOKENIZER_FILE} (nor {TOKENIZER_JSON}) at {path}: copy "
                                "the tokenizer files of the model repo next to config.json.")
    return SentencePieceTokenizer(model_file, add_bos=bool(cfg.get("add_bos_token", True)),
                                  add_eos=bool(cfg.get("add_eos_token", False)), config=cfg)
