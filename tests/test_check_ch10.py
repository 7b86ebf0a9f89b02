import numpy as np
import pytest

from course_lib.check import ch10
from course_lib.check.__main__ import self_test_one
from course_lib.check.common import EXERCISES
from course_lib.solutions import ch10 as sol
from judging import judged as _judged


@pytest.mark.parametrize("name", ["ch10.shard_source", "ch10.grad_average", "ch10.ex1", "ch10.ex2", "ch10.ex3"])
def test_self_test(name):
    assert self_test_one(EXERCISES[name]) == []


def test_sharded_source_reads_what_mindspore_num_shards_reads():
    import mindspore.dataset as ds

    class Items:
        def __len__(self):
            return 7

        def __getitem__(self, i):
            return (np.array([i], np.int32),)

    for world in (2, 3):
        for rank in range(world):
            data = ds.GeneratorDataset(Items(), column_names=["x"], shuffle=False,
                                       num_shards=world, shard_id=rank)
            ms_items = [int(row[0][0]) for row in data.create_tuple_iterator(output_numpy=True)]
            shard = sol.ShardedSource(Items(), rank, world)
            assert [int(shard[i][0][0]) for i in range(len(shard))] == ms_items


def test_average_then_clip_matches_mindspore_clip_by_global_norm():
    from mindspore import Tensor, ops
    rng = np.random.default_rng(0)
    grads = [[rng.standard_normal(s).astype(np.float32) for s in ((3, 4), (5,))] for _ in range(3)]
    mean = [np.mean([g[i] for g in grads], axis=0) for i in range(2)]
    ref = ops.clip_by_global_norm(tuple(Tensor(m) for m in mean), 0.5)
    for got, want in zip(sol.average_then_clip(grads, 0.5), ref):
        np.testing.assert_allclose(got, want.asnumpy(), rtol=1e-4, atol=1e-6)


def test_wrong_answers_get_their_hint(capsys):
    assert not ch10.shard_source(sol.wrong_unequal)
    assert "all-reduce" in capsys.readouterr().out
    assert not ch10.grad_average(sol.wrong_clip_then_average)
    assert "先裁剪、后平均" in capsys.readouterr().out


def test_numbers(capsys):
    assert ch10.ex1(8 * 4 * 2) and ch10.ex1(np.int64(64))
    assert not ch10.ex1(8 * 4) and not ch10.ex1(True)
    # 40 heads alone would allow 10, but the FFN width 13696 is not divisible by 5 or 10
    assert ch10.ex2(8) and not ch10.ex2(10) and not ch10.ex2(16)
    from course_lib.baichuan import baichuan_13b
    n = baichuan_13b().num_parameters()
    zero3 = int(np.ceil(16 * n / (32 * 2**30)))          # 16 bytes/param, split over N devices
    assert ch10.ex3(zero3) and not ch10.ex3(zero3 + 1) and not ch10.ex3(zero3 - 1)


def test_the_judge_accepts_another_correct_sharding(capsys):
    class ListShard:
        def __init__(self, source, rank, world):
            n = len(source)
            self.items = [source[(rank + i * world) % n] for i in range(-(-n // world))]

        def __len__(self):
            return len(self.items)

        def __getitem__(self, i):
            return self.items[i]
    assert _judged(ch10.shard_source, ListShard, sol.ShardedSource) == "pass"
    assert _judged(ch10.shard_source, sol.wrong_unequal, sol.ShardedSource) == "fail"
