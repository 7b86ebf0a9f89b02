"""load_hf_tokenizer: SentencePiece with the real special tokens, like the repos' slow
tokenizers (encode = [<s>] * add_bos_token + sp.encode), and streaming-safe decoding."""
import json

import pytest
import sentencepiece as spm

from course_lib import load_hf_tokenizer, lookalike


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    out = {}
    for family in ("baichuan-13b", "internlm"):
        d = tmp_path_factory.mktemp(family)
        lookalike.train_tokenizer(d, family)
        lookalike._tokenizer_files(d, family)
        out[family] = d
    return out


def test_special_ids_of_both_families(dirs):
    b = load_hf_tokenizer(dirs["baichuan-13b"])
    assert (b.unk_id, b.bos_id, b.eos_id) == (0, 1, 2)
    assert b.token_to_id("<reserved_102>") == 195 and b.token_to_id("<reserved_103>") == 196
    i = load_hf_tokenizer(dirs["internlm"])
    assert (i.unk_id, i.bos_id, i.eos_id) == (0, 1, 2)
    assert i.token_to_id("<eoa>") == i.vocab_size - 1 and i.token_to_id("<eoh>") == i.vocab_size - 2
    assert i.token_to_id("<0x0A>") == 13                 # "\n" is byte 0x0A, id 13 as in InternLM
    with pytest.raises(KeyError, match="not a piece"):
        i.token_to_id("<|User|>")                        # not one token in InternLM either


def test_encode_is_bos_plus_sentencepiece_and_config_can_turn_bos_off(dirs):
    d = dirs["baichuan-13b"]
    sp = spm.SentencePieceProcessor(model_file=str(d / "tokenizer.model"))
    text = "中国人民银行今天宣布，2024年经济增长5%。"
    assert load_hf_tokenizer(d).encode(text) == [1] + sp.encode(text)
    assert load_hf_tokenizer(d).encode(text, add_special_tokens=False) == sp.encode(text)
    cfg = json.loads((d / "tokenizer_config.json").read_text())
    (d / "tokenizer_config.json").write_text(json.dumps(dict(cfg, add_bos_token=False)))
    try:
        assert load_hf_tokenizer(d).encode(text) == sp.encode(text)
    finally:
        (d / "tokenizer_config.json").write_text(json.dumps(cfg))
    assert load_hf_tokenizer(d).decode([1] + sp.encode(text) + [2]) == text


def test_stream_decoder_never_emits_half_a_character(dirs):
    tok = load_hf_tokenizer(dirs["internlm"])
    text = "龘鱻今天"                                      # rare characters: byte-fallback pieces
    ids = tok.encode(text, add_special_tokens=False)
    assert sum(tok.sp.id_to_piece(i).startswith("<0x") for i in ids) >= 3
    stream = tok.stream()
    pieces = [stream.put(i) for i in ids]
    assert "".join(pieces) == text and not any("\ufffd" in p for p in pieces)
    assert pieces[0] == "" and pieces[1] == ""             # 龘 = 3 bytes: held until complete


def test_missing_and_garbage_tokenizer_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="No tokenizer.model"):
        load_hf_tokenizer(tmp_path)
    (tmp_path / "tokenizer.model").write_bytes(b"not a model")
    with pytest.raises(ValueError, match="not a SentencePiece model"):
        load_hf_tokenizer(tmp_path)
