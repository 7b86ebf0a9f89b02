"""course_lib.sources: what is written is what MindSpore's own readers read back; length
statistics against NumPy; padding cost against what padded_batch really produces."""
import matplotlib

matplotlib.use("Agg")

import mindspore.dataset as ds  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from course_lib import sources  # noqa: E402


def _column(dataset, name):
    return [row[name] for row in dataset.create_dict_iterator(output_numpy=True)]


def test_random_access_source_shuffles_and_shards():
    source = sources.ExampleSource([(f"t{i}", i) for i in range(20)])
    plain = [int(x) for x in _column(ds.GeneratorDataset(source, ["text", "label"], shuffle=False), "label")]
    assert plain == list(range(20))
    shuffled = [int(x) for x in _column(ds.GeneratorDataset(source, ["text", "label"], shuffle=True), "label")]
    assert sorted(shuffled) == plain and shuffled != plain
    shards = [[int(x) for x in _column(ds.GeneratorDataset(source, ["text", "label"], shuffle=False,
                                                            num_shards=2, shard_id=k), "label")]
              for k in (0, 1)]
    assert sorted(shards[0] + shards[1]) == plain and not set(shards[0]) & set(shards[1])
    text = _column(ds.GeneratorDataset(source, ["text", "label"], shuffle=False), "text")[3]
    assert str(text) == "t3"


def test_generator_function_cannot_shuffle_or_shard():
    """The MindSpore behaviour chapter 03 warns about (so the notebook's claim stays true)."""
    def gen():
        for i in range(10):
            yield (np.array(i, np.int32),)
    order = [int(x) for x in _column(ds.GeneratorDataset(gen, ["x"], shuffle=True), "x")]
    assert order == list(range(10))          # shuffle=True silently ignored
    with pytest.raises(ValueError, match="num_shards is not supported"):
        ds.GeneratorDataset(gen, ["x"], num_shards=2, shard_id=0)


def test_csv_round_trip_with_commas_and_quotes(tmp_path):
    rows = [("好,很好", 1), ('他说"不错"', 1), ("差评。", 0)]
    path = sources.write_csv(tmp_path / "r.csv", rows)
    data = ds.CSVDataset(str(path), column_defaults=["", 0], shuffle=False)
    assert data.get_col_names() == ["text", "label"]
    got = [(str(r["text"]), int(r["label"])) for r in data.create_dict_iterator(output_numpy=True)]
    assert got == rows


def test_csv_header_is_data_when_column_names_are_given(tmp_path):
    """Passing column_names makes CSVDataset parse the header line as a row."""
    path = sources.write_csv(tmp_path / "r.csv", [("好", 1)])
    data = ds.CSVDataset(str(path), column_defaults=["", 0], column_names=["text", "label"],
                         shuffle=False)
    with pytest.raises(RuntimeError, match="type does not match"):
        _column(data, "label")


def test_mindrecord_round_trip_and_overwrite(tmp_path, tokenizer):
    examples = [("这本书非常好看", 1), ("质量太差了，不推荐", 0), ("还行", 1)]
    path = tmp_path / "reviews.mindrecord"
    for _ in range(2):                        # writing twice must not fail
        sources.write_mindrecord(path, examples, tokenizer, max_len=4)
    assert (tmp_path / "reviews.mindrecord.db").exists()
    data = ds.MindDataset(str(path), columns_list=["text", "input_ids", "label"], shuffle=False)
    assert data.get_dataset_size() == 3
    for row, (text, label) in zip(data.create_dict_iterator(output_numpy=True), examples):
        assert str(row["text"]) == text and int(row["label"]) == label
        assert row["input_ids"].dtype == np.int32
        assert row["input_ids"].tolist() == tokenizer.encode(text)[:4]


def test_image_folder_layout_determinism_and_reader(tmp_path):
    counts = sources.make_image_folder(tmp_path / "a", per_class=4, size=16, seed=3)
    assert counts == {"circle": 4, "square": 4, "triangle": 4}
    sources.make_image_folder(tmp_path / "b", per_class=4, size=16, seed=3)
    for f in (tmp_path / "a").rglob("*.png"):
        assert f.read_bytes() == (tmp_path / "b" / f.relative_to(tmp_path / "a")).read_bytes()
    sources.make_image_folder(tmp_path / "a", per_class=2, size=16, seed=3)   # re-run, fewer
    data = ds.ImageFolderDataset(str(tmp_path / "a"), shuffle=False, decode=True)
    assert data.get_dataset_size() == 6
    assert data.get_class_indexing() == {"circle": 0, "square": 1, "triangle": 2}
    image, label = next(data.create_tuple_iterator(output_numpy=True))
    assert image.shape == (16, 16, 3) and image.dtype == np.uint8 and int(label) == 0
    assert image.max() >= 60                  # the shape is brighter than the noise (< 50)


def test_length_stats_match_numpy_nearest_rank():
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 500, 1001)
    stats = sources.length_stats(lengths, (50, 90, 99))
    for p in (50, 90, 99):
        assert stats[f"p{p}"] == int(np.percentile(lengths, p, method="inverted_cdf"))
    assert stats["count"] == 1001 and stats["max"] == lengths.max() and stats["min"] == lengths.min()
    assert stats["mean"] == round(float(lengths.mean()), 2)


def test_padding_fraction_matches_padded_batch():
    lengths = [3, 1, 4, 2, 5, 2, 2]
    assert sources.padding_fraction(lengths, 2, max_len=4) == pytest.approx(1 - 18 / 28)   # kept 3+1+4+2+4+2+2
    # what padded_batch really produces: count the pad tokens (value 0) in each batch
    def gen():
        for n in lengths:
            yield (np.arange(1, n + 1, dtype=np.int32),)
    batched = ds.GeneratorDataset(gen, ["ids"], shuffle=False).padded_batch(2, pad_info={"ids": (None, 0)})
    grids = [b[0] for b in batched.create_tuple_iterator(output_numpy=True)]
    real = sum(int((g == 0).sum()) for g in grids) / sum(g.size for g in grids)
    assert sources.padding_fraction(lengths, 2) == pytest.approx(real)
    assert sources.padding_fraction(lengths, 2, sort=True) < real


def test_histogram_plot_draws_bars_and_markers():
    ax = sources.plot_length_histogram(np.arange(1, 200), cutoff=64, bins=20)
    assert len(ax.patches) == 20
    assert {t.get_text() for t in ax.get_legend().get_texts()} == {"median 100", "p95 190", "cutoff 64"}


def test_empty_and_malformed_inputs_give_clear_errors(tmp_path, tokenizer):
    with pytest.raises(ValueError, match="No examples: a dataset built from it would be empty"):
        sources.ExampleSource([])
    with pytest.raises(ValueError, match="same number of fields"):
        sources.ExampleSource([("a", 1), ("b",)])
    with pytest.raises(ValueError, match="No rows to write"):
        sources.write_csv(tmp_path / "x.csv", [])
    with pytest.raises(ValueError, match=r"Each row needs 2 fields \('text', 'label'\)"):
        sources.write_csv(tmp_path / "x.csv", [("a", 1, 2)])
    with pytest.raises(ValueError, match="No examples"):
        sources.write_mindrecord(tmp_path / "x.mindrecord", [], tokenizer)
    with pytest.raises(ValueError, match="No lengths"):
        sources.length_stats([])
    with pytest.raises(ValueError, match="Unknown shape classes"):
        sources.make_image_folder(tmp_path, classes=("star",))
