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


# ---- the new families: tiny tokenizers carrying each repo's real special-token NAMES ----
# (names and flags from each repo's tokenizer_config.json `added_tokens_decoder`; ids differ)
SPECIALS = {
    "qwen2": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
    "qwen3": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
    "llama3": ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
               "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>"],
    "internlm2": ["<|plugin|>", "<|interpreter|>", "<|action_end|>", "<|action_start|>",
                  "<|im_end|>", "<|im_start|>"],
}
NAMES = {  # bos, eos, pad as in the real tokenizer_config.json files
    "qwen2": (None, "<|im_end|>", "<|endoftext|>"), "qwen3": (None, "<|im_end|>", "<|endoftext|>"),
    "llama3": ("<|begin_of_text|>", "<|eot_id|>", None),
}
TEXTS = ["中国人民银行今天宣布，2024年经济增长5%。", "Hello, world! It's a test.",
         "<|im_start|>user\n你好 Qwen<|im_end|>\n", "混合 mixed text：龘鱻 and emoji-free."]


def _entry(i, name, special=True):
    return str(i), {"content": name, "lstrip": False, "normalized": False, "rstrip": False,
                    "single_word": False, "special": special}


def make_bpe_dir(d, family, n_docs=300):
    """A byte-level BPE tokenizer.json (+ tokenizer_config.json) like Qwen's or Llama-3's."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from course_lib.data import news_documents
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    docs = news_documents()[:n_docs] + ["Hello world, it's an English sentence."] * 20
    tok.train_from_iterator(docs, trainers.BpeTrainer(
        vocab_size=800, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    tok.add_special_tokens(SPECIALS[family])
    extra = ["<think>", "</think>"] if family == "qwen3" else []   # special: false in Qwen3
    tok.add_tokens(extra)
    if family == "llama3":
        tok.post_processor = processors.TemplateProcessing(
            single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B",
            special_tokens=[("<|begin_of_text|>", tok.token_to_id("<|begin_of_text|>"))])
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.save(str(d / "tokenizer.json"))
    bos, eos, pad = NAMES[family]
    added = dict(_entry(tok.token_to_id(n), n) for n in SPECIALS[family])
    added.update(_entry(tok.token_to_id(n), n, False) for n in extra)
    cfg = {"added_tokens_decoder": added, "bos_token": bos, "eos_token": eos, "pad_token": pad,
           "clean_up_tokenization_spaces": family == "llama3", "model_max_length": 32768,
           "tokenizer_class": "PreTrainedTokenizerFast"}
    if family != "llama3":
        cfg["add_bos_token"] = False
    (d / "tokenizer_config.json").write_text(json.dumps(cfg, ensure_ascii=False, indent=2))
    return d


def make_sp_dir(d, family):
    """A SentencePiece tokenizer.model + tokenizer_config.json like Llama-2's, InternLM2's
    (added tokens as user-defined pieces) or Baichuan2's (<reserved_*>, add_bos_token false)."""
    from course_lib.data import news_documents
    if family.startswith("baichuan2"):
        lookalike.train_tokenizer(d, "baichuan-13b")
        cfg = {"add_bos_token": False, "add_eos_token": False, "bos_token": "<s>",
               "eos_token": "</s>", "pad_token": "<unk>", "unk_token": "<unk>",
               "tokenizer_class": "BaichuanTokenizer"}
    else:
        symbols = SPECIALS.get(family, [])
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(news_documents()[:1000] + ["Hello world."] * 20),
            model_prefix=str(d / "tokenizer"), vocab_size=3000, model_type="bpe",
            character_coverage=0.98, byte_fallback=True, unk_id=0, bos_id=1, eos_id=2,
            pad_id=-1, user_defined_symbols=symbols, add_dummy_prefix=family == "llama2",
            remove_extra_whitespaces=False, normalization_rule_name="identity",
            num_threads=1, minloglevel=2)
        (d / "tokenizer.vocab").unlink()
        sp = spm.SentencePieceProcessor(model_file=str(d / "tokenizer.model"))
        added = dict(_entry(i, n) for i, n in enumerate(["<unk>", "<s>", "</s>"]))
        added.update(_entry(sp.piece_to_id(n), n) for n in symbols)
        cfg = {"added_tokens_decoder": added, "bos_token": "<s>", "eos_token": "</s>",
               "unk_token": "<unk>", "pad_token": "</s>" if family == "internlm2" else None,
               "add_bos_token": True, "add_eos_token": False, "legacy": True,
               "tokenizer_class": "LlamaTokenizer"}
        if family == "internlm2":              # as in internlm2_5-1_8b-chat's config
            cfg["additional_special_tokens"] = SPECIALS[family]
    (d / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2))
    return d


@pytest.fixture(scope="module")
def new_dirs(tmp_path_factory):
    out = {f: make_bpe_dir(tmp_path_factory.mktemp(f), f) for f in ("qwen2", "qwen3", "llama3")}
    out.update({f: make_sp_dir(tmp_path_factory.mktemp(f), f)
                for f in ("llama2", "internlm2", "baichuan2-7b")})
    return out


@pytest.mark.parametrize("family", ["qwen2", "qwen3", "llama3"])
def test_tokenizer_json_matches_transformers_fast(new_dirs, family):
    from transformers import PreTrainedTokenizerFast
    d = new_dirs[family]
    ours, ref = load_hf_tokenizer(d), PreTrainedTokenizerFast.from_pretrained(str(d))
    assert type(ours).__name__ == "BPETokenizer"
    for text in TEXTS:
        ids = ours.encode(text)
        assert ids == ref(text)["input_ids"], text
        assert ours.encode(text, add_special_tokens=False) == ref(text, add_special_tokens=False)["input_ids"]
        for skip in (True, False):
            assert ours.decode(ids, skip_special_tokens=skip) == ref.decode(ids, skip_special_tokens=skip)
    assert (ours.bos_id, ours.eos_id, ours.pad_id) == (ref.bos_token_id, ref.eos_token_id, ref.pad_token_id)
    assert ours.vocab_size == len(ref)
    assert ours.encode("<|im_start|>" if family != "llama3" else "<|eot_id|>", False) == [
        ours.token_to_id("<|im_start|>" if family != "llama3" else "<|eot_id|>")]
    assert ours.is_special(ours.eos_id) and not ours.is_special(ours.encode("中", False)[0])
    if family == "qwen3":                      # <think> is an added token but not special
        assert not ours.is_special(ours.token_to_id("<think>"))
    with pytest.raises(KeyError, match="not a token"):
        ours.token_to_id("<|no such token|>")


def test_llama3_bos_comes_from_the_post_processor(new_dirs):
    tok = load_hf_tokenizer(new_dirs["llama3"])
    assert tok.encode("hi")[0] == tok.bos_id == tok.token_to_id("<|begin_of_text|>")
    assert load_hf_tokenizer(new_dirs["qwen2"]).bos_id is None       # Qwen: "bos_token": null


@pytest.mark.parametrize("family", ["llama2", "internlm2", "baichuan2-7b"])
def test_tokenizer_model_matches_transformers_slow(new_dirs, family):
    from transformers import LlamaTokenizer
    d = new_dirs[family]
    ours = load_hf_tokenizer(d)
    ref = LlamaTokenizer.from_pretrained(str(d), legacy=True,
                                         add_bos_token=family != "baichuan2-7b")
    assert type(ours).__name__ == "SentencePieceTokenizer"
    for text in TEXTS:
        assert ours.encode(text) == ref(text)["input_ids"], text
        ids = ours.encode(text, add_special_tokens=False)
        assert ours.decode(ids) == ref.decode(ids, skip_special_tokens=True)
    if family == "internlm2":
        assert ours.encode("<|im_start|>", False) == [ours.token_to_id("<|im_start|>")]
        assert ours.is_special(ours.token_to_id("<|im_end|>"))
        assert ours.pad_id == ours.eos_id


def test_tokenizer_json_is_preferred_like_transformers(new_dirs, tmp_path):
    import shutil
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(new_dirs["qwen2"] / name, tmp_path / name)
    shutil.copy(new_dirs["llama2"] / "tokenizer.model", tmp_path / "tokenizer.model")
    assert type(load_hf_tokenizer(tmp_path)).__name__ == "BPETokenizer"


def test_byte_level_stream_never_emits_half_a_character(new_dirs):
    tok = load_hf_tokenizer(new_dirs["qwen2"])
    text = "龘鱻今天"                                 # rare: split into byte-level pieces
    ids = tok.encode(text, add_special_tokens=False)
    stream = tok.stream()
    pieces = [stream.put(i) for i in ids]
    assert "".join(pieces) == text and not any("\ufffd" in p for p in pieces)
    assert "" in pieces                               # at least one character was held back


def test_corrupt_tokenizer_json_and_config(tmp_path):
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(ValueError, match="not a tokenizers JSON file"):
        load_hf_tokenizer(tmp_path)
    (tmp_path / "tokenizer_config.json").write_text("{bad")
    with pytest.raises(ValueError, match="tokenizer_config.json is not valid JSON"):
        load_hf_tokenizer(tmp_path)
