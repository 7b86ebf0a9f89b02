import json

import pytest

from course_lib import tokenizer as T


def test_roundtrip_is_exact_on_real_and_unseen_text(tokenizer):
    samples = ["中共中央总书记、国家主席江泽民发表１９９８年新年讲话。",
               "龘靐齉爩 — 语料里没有的字", "MindSpore 2.7 + emoji 😀\n换行\t制表",
               "   leading spaces", ""]
    for s in samples:
        assert tokenizer.decode(tokenizer.encode(s)) == s


def test_vocab_and_special_ids(tokenizer):
    assert tokenizer.vocab_size == T.VOCAB_SIZE == 8000
    assert (tokenizer.pad_id, tokenizer.bos_id, tokenizer.eos_id) == (0, 1, 2)
    ids = tokenizer.encode("你好", add_bos=True, add_eos=True)
    assert ids[0] == 1 and ids[-1] == 2
    assert tokenizer.decode(ids) == "你好"
    assert "<bos>" in tokenizer.decode(ids, skip_special=False)


def test_subwords_compress_chinese(tokenizer):
    from course_lib.data import news_splits
    val = news_splits().validation[:200]
    chars = sum(map(len, val))
    tokens = sum(map(len, tokenizer.encode_batch(val)))
    assert chars / tokens > 1.3  # merges learned real words, not just bytes


def test_chat_format_masks_the_prompt(tokenizer):
    text = tokenizer.format_chat("判断情感：很好看", "正面")
    assert text == "<|user|>判断情感：很好看<|end|><|assistant|>正面<|end|>"
    ids, mask = tokenizer.encode_chat("判断情感：很好看", "正面")
    answer = [i for i, m in zip(ids, mask) if m]
    assert tokenizer.decode(answer) == "正面"
    assert answer[-1] == tokenizer.end_id and ids[0] == tokenizer.bos_id
    assert tokenizer.user_id in ids and tokenizer.assistant_id in ids


def test_bad_inputs(tokenizer, tmp_path):
    with pytest.raises(TypeError, match="takes a str"):
        tokenizer.encode(123)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        tokenizer.decode([5, 99999])
    with pytest.raises(ValueError, match="empty text"):
        T.train_tokenizer(["", ""])
    with pytest.raises(FileNotFoundError):
        T.load_tokenizer(tmp_path / "nope.json")


def test_shipped_tokenizer_is_reproduced_by_the_recorded_recipe(tmp_path):
    retrained = tmp_path / "tok.json"
    T.train_course_tokenizer().save(retrained)
    shipped = json.loads(T.SHIPPED_PATH.read_text(encoding="utf-8"))
    assert json.loads(retrained.read_text(encoding="utf-8")) == shipped
