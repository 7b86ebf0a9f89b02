"""Data-parallel training under msrun (2 CPU workers, mccl): the all-reduce really happens.

Evidence, each checked against an independent computation in this process:
* with DATA_PARALLEL both ranks end with bit-identical weights; without it they diverge;
* rank 0's first gradient norm equals the norm of the gradient of the *global* batch
  (rank 0's batch + rank 1's batch) computed here in one process — the mean all-reduce —
  while without the parallel context it equals the norm of rank 0's own batch.
"""
import numpy as np
import pytest

from course_lib.distributed import train_dp

# Tiny on purpose: 2 workers + scheduler share 2 CPU cores with the rest of the test run.
OPTIONS = dict(steps=2, hidden=32, layers=1, heads=2, batch_size=4, block_size=32,
               max_docs=120, log_every=1, mode="pynative", seed=0, threads=1, blocking=True)


def test_script_args_round_trip():
    argv = train_dp.script_args(steps=3, no_parallel=True, out=None, batch_size=4)
    assert argv == ["--steps", "3", "--no-parallel", "--batch-size", "4"]
    args = train_dp.parse_args(argv)
    assert args.steps == 3 and args.no_parallel and args.batch_size == 4
    with pytest.raises(SystemExit):
        train_dp.parse_args(["--steps", "0"])


def test_shards_are_disjoint_and_cover_the_data():
    blocks = np.arange(40 * 5, dtype=np.int32).reshape(40, 5)   # row i starts with 5*i
    seen = []
    for rank in range(2):
        ds = train_dp.sharded_dataset(blocks, 4, rank, 2, seed=0)
        rows = [int(x) // 5 for ids, _ in ds.create_tuple_iterator(num_epochs=1)
                for x in ids.asnumpy()[:, 0]]
        assert len(rows) == 20
        seen.append(set(rows))
    assert not seen[0] & seen[1]
    assert seen[0] | seen[1] == set(range(40))


def test_digest_tells_apart_weights_the_fingerprint_cannot():
    a = {"w": np.array([1.0, 2.0], np.float32), "b": np.zeros(3, np.float32)}
    swapped = {"w": np.array([2.0, 1.0], np.float32), "b": np.zeros(3, np.float32)}
    assert train_dp.fingerprint(a) == train_dp.fingerprint(swapped)      # same sum of |w|
    assert train_dp.digest(a) != train_dp.digest(swapped)
    assert train_dp.digest(a) == train_dp.digest({k: v.copy() for k, v in reversed(a.items())})
    assert train_dp.digest(a) != train_dp.digest({**a, "b": np.zeros(3, np.float64)})


def test_rank_difference_on_saved_weights(tmp_path):
    w = {"a": np.zeros((2, 2), np.float32), "b": np.ones(3, np.float32)}
    np.savez(tmp_path / "weights_rank0.npz", **w)
    np.savez(tmp_path / "weights_rank1.npz", a=w["a"], b=w["b"] + np.float32(0.25))
    assert train_dp.max_rank_difference(tmp_path) == 0.25
    with pytest.raises(FileNotFoundError, match="did the run finish"):
        train_dp.max_rank_difference(tmp_path / "nothing")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One data-parallel run and one without the parallel context (about 20-40 s each)."""
    root = tmp_path_factory.mktemp("dp")
    dp = train_dp.launch(root / "dp", workers=2, timeout=300, **OPTIONS)
    solo = train_dp.launch(root / "solo", workers=2, timeout=300, no_parallel=True, **OPTIONS)
    return root, dp, solo


@pytest.mark.slow
def test_data_parallel_ranks_end_identical(runs):
    root, dp, _ = runs
    assert dp.ok and sorted(dp.logs) == [0, 1]
    starts = {r["rank"]: r for r in dp.records(kind="start")}
    assert all(s["world"] == 2 and s["parallel"] for s in starts.values())
    # the same initial weights, different data on each rank
    assert starts[0]["init_fingerprint"] == starts[1]["init_fingerprint"]
    assert starts[0]["init_digest"] == starts[1]["init_digest"]          # bit-identical start
    assert all(s["parallel_mode"] == "data_parallel" for s in starts.values())
    assert starts[0]["first_batch_sum"] != starts[1]["first_batch_sum"]
    # rank-0-only logging and checkpointing
    assert {r["rank"] for r in dp.records(kind="step")} == {0}
    assert (root / "dp" / "model.ckpt").exists()
    assert [r["rank"] for r in dp.records(kind="end") if r["checkpoint"]] == [0]
    assert train_dp.max_rank_difference(root / "dp") == 0.0
    ends = {r["rank"]: r for r in dp.records(kind="end")}
    assert ends[0]["fingerprint"] == ends[1]["fingerprint"] != starts[0]["init_fingerprint"]


@pytest.mark.slow
def test_without_parallel_context_ranks_diverge(runs):
    root, _, solo = runs
    assert solo.ok
    assert not any(s["parallel"] for s in solo.records(kind="start"))
    assert {s["parallel_mode"] for s in solo.records(kind="start")} == {"stand_alone"}
    assert train_dp.max_rank_difference(root / "solo") > 1e-4


def test_blocks_file_names_each_scale_apart(tmp_path):
    full = train_dp.blocks_file(tmp_path, block_size=64, max_docs=None)
    ci = train_dp.blocks_file(tmp_path, **OPTIONS)
    assert full.name == "blocks_64_all.npy" and ci.name == "blocks_32_120.npy"


@pytest.mark.slow
def test_first_gradient_is_the_mean_over_both_ranks(runs):
    root, dp, solo = runs
    decoy = train_dp.blocks_file(root / "dp", block_size=64, max_docs=None)   # another scale's
    np.save(decoy, np.zeros((8, 65), np.int32))                                # corpus, same folder
    here = train_dp.first_step_norms(root / "dp", **OPTIONS)
    start = dp.records(rank=0, kind="start")[0]
    assert here["first_batch_sum"] == start["first_batch_sum"]     # we rebuilt rank 0's batch
    assert here["init_fingerprint"] == pytest.approx(start["init_fingerprint"], abs=1e-2)
    dp_norm = dp.records(rank=0, kind="step")[0]["grad_norm"]
    solo_norm = solo.records(rank=0, kind="step")[0]["grad_norm"]
    assert dp_norm == pytest.approx(here["all_ranks"], rel=1e-3)
    assert solo_norm == pytest.approx(here["rank0_alone"], rel=1e-3)
    assert abs(here["all_ranks"] - here["rank0_alone"]) > 0.01 * here["rank0_alone"]
