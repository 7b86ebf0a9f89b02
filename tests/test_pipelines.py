import numpy as np
import pytest

from course_lib import pipelines as P


def test_pack_blocks_concatenates_with_eos_and_shifts():
    blocks = P.pack_blocks([[5, 6, 7], [8, 9]], block_size=3, eos_id=2)
    # stream: 5 6 7 2 8 9 2 -> one row of 4, remainder dropped
    np.testing.assert_array_equal(blocks, [[5, 6, 7, 2]])
    x, y = P.BlockSource(blocks)[0]
    np.testing.assert_array_equal(x, [5, 6, 7])
    np.testing.assert_array_equal(y, [6, 7, 2])


def test_pack_blocks_errors():
    with pytest.raises(ValueError, match="block_size"):
        P.pack_blocks([[1]], 0)
    with pytest.raises(ValueError, match="not enough for one block"):
        P.pack_blocks([[1, 2]], 8)


def test_dataset_batches_and_shuffle_is_seeded():
    blocks = np.arange(10 * 5, dtype=np.int32).reshape(10, 5)

    def order(seed):
        d = P.make_dataset(P.BlockSource(blocks), batch_size=2, seed=seed)
        return [x.asnumpy()[:, 0].tolist() for x, _ in d.create_tuple_iterator()]
    a, b, c = order(1), order(1), order(2)
    assert a == b and a != c
    assert sorted(v for batch in a for v in batch) == list(range(0, 50, 5))


def test_shards_are_disjoint_and_cover_the_data():
    blocks = np.arange(8 * 3, dtype=np.int32).reshape(8, 3)
    seen = []
    for shard in range(2):
        d = P.make_dataset(P.BlockSource(blocks), 1, shuffle=False, num_shards=2, shard_id=shard)
        seen.append({int(x.asnumpy()[0, 0]) for x, _ in d.create_tuple_iterator()})
    assert not (seen[0] & seen[1]) and seen[0] | seen[1] == set(range(0, 24, 3))


def test_empty_and_too_small_sources_are_rejected():
    with pytest.raises(ValueError, match="empty"):
        P.BlockSource(np.zeros((0, 4), np.int32))
    with pytest.raises(ValueError, match="fewer than one batch"):
        P.make_dataset(P.BlockSource(np.zeros((2, 4), np.int32)), batch_size=4)


def test_lm_dataset_on_the_news_corpus(tokenizer):
    from course_lib.data import news_splits
    d = P.lm_dataset(news_splits().validation[:100], tokenizer, block_size=32, batch_size=4)
    x, y = next(d.create_tuple_iterator())
    assert x.shape == (4, 32) and y.shape == (4, 32)
    np.testing.assert_array_equal(x.asnumpy()[:, 1:], y.asnumpy()[:, :-1])
