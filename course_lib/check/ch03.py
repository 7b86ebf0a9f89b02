"""Checkers for notebook 03 (mindspore.dataset pipelines)."""
from .common import verdict


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def ex1(answer) -> bool:
    """ds.NumpySlicesDataset(list(range(103)), column_names=["x"]).batch(8,
    drop_remainder=True).repeat(2): how many batches?"""
    import mindspore.dataset as ds
    data = ds.NumpySlicesDataset(list(range(103)), column_names=["x"], shuffle=False)
    expected = data.batch(8, drop_remainder=True).repeat(2).get_dataset_size()
    return verdict(_is_int(answer) and answer == expected,
                   "drop_remainder=True 丢掉不满 8 个的尾巴，repeat(2) 再翻倍。", "ch03.ex1")


def ex2(answer) -> bool:
    """The first 100 news documents (course_lib.data.news_documents()[:100]) tokenised,
    each followed by <eos>, packed with pack_blocks(..., block_size=64): how many rows?"""
    from ..data import news_documents
    from ..tokenizer import load_tokenizer
    ids = load_tokenizer().encode_batch(news_documents()[:100])
    expected = sum(len(x) + 1 for x in ids) // 65      # every row holds block_size + 1 tokens
    return verdict(_is_int(answer) and answer == expected,
                   "总 token 数（每篇文档再加一个 <eos>）整除 block_size + 1。", "ch03.ex2")


def ex3(answer) -> bool:
    """The 95th percentile (nearest rank) of the token lengths of the *validation* reviews?"""
    import numpy as np
    from ..data import review_splits
    from ..tokenizer import load_tokenizer
    texts = [t for t, _ in review_splits().validation]
    lengths = [len(x) for x in load_tokenizer().encode_batch(texts)]
    expected = int(np.percentile(lengths, 95, method="inverted_cdf"))
    return verdict(_is_int(answer) and answer == expected,
                   "sources.token_lengths + sources.length_stats(..., (95,)) 里的 p95。", "ch03.ex3")
