import numpy as np

from course_lib.check import ch10
from course_lib.solutions import ch10 as sol
from judging import judged as _judged


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
    from course_lib.baichuan import baichuan_13b
    n = baichuan_13b().num_parameters()
    # ex1: DP16 + ZeRO-1: fp16 weights and gradients whole (2 + 2 bytes), fp32 master and
    # AdamW m, v (4 + 8 bytes) split over 16 devices; no activations
    zero1 = n * (2 + 2 + 12 / 16) / 2**30
    assert ch10.ex1(zero1) and ch10.ex1(round(zero1, 2)) and ch10.ex1(np.float32(zero1))
    assert not ch10.ex1(16 * n / 16 / 2**30)              # everything split (ZeRO-3)
    assert not ch10.ex1(n * (2 + 2 + 12 / 8) / 2**30)     # 8 devices, as in the section-8 table
    # ex2: h = 5120, f = 13696: W_pack (3h, h), o_proj (h, h), gate/up (f, h), down (h, f) split
    # in 8; the two RMSNorm weights (h each) whole on every device
    h, f = 5120, 13696
    per_device = (3 * h * h + h * h + 3 * f * h) // 8 + 2 * h
    assert ch10.ex2(per_device) and ch10.ex2(39_413_760)
    assert not ch10.ex2((4 * h * h + 3 * f * h + 2 * h) // 8)   # the norms split too
    assert not ch10.ex2(8) and not ch10.ex2(True)
    # ex3: 16 devices: 197.66 GiB / 16 + micro_batch x 4.60 GiB (unsharded activations) <= 32
    assert ch10.ex3(4) and ch10.ex3(np.int64(4))
    assert not ch10.ex3(5) and not ch10.ex3(1) and not ch10.ex3(15)


def test_ex3_by_hand():
    """The calculator's answer follows from its own parts: the state sharded over 16 devices
    plus micro_batch times the activations of one micro-batch."""
    import math
    from course_lib import memory
    from course_lib.baichuan import baichuan_13b
    big = baichuan_13b()
    state = memory.training_state_bytes(big.num_parameters()).total
    act = memory.activation_bytes(big, micro_batch=1, seq_len=big.max_seq_len, recompute=True)
    assert math.floor((32 * 2**30 - state / 16) / act) == 4


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
