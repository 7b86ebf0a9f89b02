"""Sentiment classifier and Model helpers: data encoding, padding invariance, a small real
training run that must beat the majority-class baseline, mixed precision on CPU, errors."""
import mindspore as ms
import numpy as np
import pytest
from mindspore import nn
from mindspore.train import Model

from course_lib import classifier as C
from course_lib.data import review_splits
from course_lib.metrics import BinaryF1, make_metrics


@pytest.fixture(scope="module")
def splits():
    return review_splits()


def test_encode_reviews_truncates_and_pads(tokenizer):
    examples = [("这本书很好看，推荐给大家", 1), ("差", 0), ("", 0)]
    ids, labels = C.encode_reviews(examples, tokenizer, max_len=4)
    assert ids.dtype == np.int32 and ids.shape == (3, 4)
    assert labels.tolist() == [1, 0, 0]
    for row, (text, _) in zip(ids, examples):
        expected = tokenizer.encode(text)[:4]
        assert row[:len(expected)].tolist() == expected
        assert (row[len(expected):] == tokenizer.pad_id).all()


def test_review_dataset_columns_and_batches(tokenizer, splits):
    data = C.review_dataset(splits.train[:50], tokenizer, max_len=16, batch_size=8, shuffle=False)
    assert data.get_col_names() == ["input_ids", "label"]
    assert data.get_dataset_size() == 7            # ceil(50 / 8) without drop_remainder
    ids, labels = next(data.create_tuple_iterator(output_numpy=True))
    assert ids.shape == (8, 16) and ids.dtype == np.int32 and labels.dtype == np.int32
    assert labels.tolist() == [y for _, y in splits.train[:8]]


def test_majority_baseline_closed_form():
    assert C.majority_baseline([0, 0, 1], [0, 1, 1, 1]) == (0, 0.25)
    assert C.majority_baseline([1, 1, 0], [0, 1, 1, 1]) == (1, 0.75)
    assert C.majority_baseline([0, 1], [0, 0, 1])[0] == 0   # a tie picks the smaller label
    with pytest.raises(ValueError, match="non-empty"):
        C.majority_baseline([], [1])


def test_logits_do_not_depend_on_the_amount_of_padding(tokenizer):
    net = C.SentimentClassifier(tokenizer.vocab_size, max_len=32, embed_dim=16, num_heads=2,
                                ffn_dim=32, num_layers=2)
    net.set_train(False)
    examples = [("物流很快，质量不错", 1), ("一般般吧", 0)]
    short, _ = C.encode_reviews(examples, tokenizer, 12)
    long_, _ = C.encode_reviews(examples, tokenizer, 32)
    a = net(ms.Tensor(short)).asnumpy()
    b = net(ms.Tensor(long_)).asnumpy()
    assert a.shape == (2, 2)
    np.testing.assert_allclose(a, b, atol=1e-5)


def test_parameter_count_matches_closed_form(tokenizer):
    from course_lib.blocks import count_parameters, transformer_block_param_count
    V, T, E, F = tokenizer.vocab_size, 24, 16, 48
    net = C.SentimentClassifier(V, T, embed_dim=E, num_heads=4, ffn_dim=F, num_layers=2)
    expected = V * E + T * E + 2 * transformer_block_param_count(E, F) + 2 * E + (E * 2 + 2)
    assert count_parameters(net) == expected


def test_training_with_model_beats_majority_baseline(tokenizer, splits):
    """A small but real run (2,000 reviews, 1 epoch, GRAPH mode): validation accuracy must be
    clearly above always answering the majority class."""
    ms.set_context(mode=ms.GRAPH_MODE)
    val = splits.validation[:600]
    train = C.review_dataset(splits.train[:2000], tokenizer, 48, 16, seed=0)
    net = C.SentimentClassifier(tokenizer.vocab_size, 48, embed_dim=64, num_heads=4,
                                ffn_dim=128, dropout=0.0)
    model = C.build_model(net, lr=1e-3, metrics=("accuracy", "f1"))
    model.train(1, train, dataset_sink_mode=False)
    result = model.eval(C.review_dataset(val, tokenizer, 48, 200, shuffle=False),
                        dataset_sink_mode=False)
    _, baseline = C.majority_baseline([y for _, y in splits.train], [y for _, y in val])
    assert 0.45 < baseline < 0.6
    assert result["accuracy"] > baseline + 0.10, (result, baseline)
    # predict() agrees with eval(): same accuracy from the argmax of the logits
    ids, labels = C.encode_reviews(val, tokenizer, 48)
    assert np.isclose((C.predict_labels(model, ids) == labels).mean(), result["accuracy"])


def test_cpu_o2_needs_loss_scale_manager_none(tokenizer):
    """The platform fact chapter 02 teaches: the default loss scale manager is refused on
    CPU; None works and the network then computes in float16."""
    net = C.SentimentClassifier(tokenizer.vocab_size, 8, embed_dim=16, num_heads=2, ffn_dim=32)
    with pytest.raises(ValueError, match="Only `loss_scale_manager=None`"):
        Model(net, nn.CrossEntropyLoss(), nn.Adam(net.trainable_params(), 1e-3), amp_level="O2")
    net = C.SentimentClassifier(tokenizer.vocab_size, 8, embed_dim=16, num_heads=2, ffn_dim=32)
    model = C.build_model(net, amp_level="O2")
    data = C.review_dataset([("好", 1), ("差", 0)] * 4, tokenizer, 8, 4)
    model.train(1, data, dataset_sink_mode=False)
    logits = model.predict(ms.Tensor(np.ones((2, 8), np.int32)))
    assert logits.dtype == ms.float16
    assert np.isfinite(logits.asnumpy()).all()
    assert net.head.weight.dtype == ms.float32     # master weights stay float32


def test_loss_scale_manager_choice_per_device():
    from mindspore.amp import DynamicLossScaleManager
    assert C.loss_scale_manager_for("CPU", "O2") is None
    assert C.loss_scale_manager_for("Ascend", "O0") is None
    assert isinstance(C.loss_scale_manager_for("Ascend", "O2"), DynamicLossScaleManager)
    with pytest.raises(ValueError, match="Unknown amp_level 'O4'"):
        C.loss_scale_manager_for("CPU", "O4")


def test_o1_is_refused_with_an_explanation(tokenizer, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)   # O1 would write ./rewritten_network if it got that far
    net = C.SentimentClassifier(tokenizer.vocab_size, 8, embed_dim=16, num_heads=2, ffn_dim=32)
    with pytest.raises(ValueError, match="O1.*rewriting the network's Python source"):
        C.build_model(net, amp_level="O1")
    assert not any(tmp_path.iterdir())


def test_unknown_metric_name_is_a_clear_error():
    with pytest.raises(ValueError, match=r"Unknown metric name\(s\) \['acuracy'\]; choose from"):
        make_metrics(["acuracy"])
    made = make_metrics(("accuracy", "f1"))
    assert set(made) == {"accuracy", "f1"} and isinstance(made["f1"], BinaryF1)
    with pytest.raises(ValueError, match="Unknown amp_level 'O4'"):
        C.build_model(C.SentimentClassifier(50, 8, embed_dim=8, num_heads=2, ffn_dim=16),
                      amp_level="O4")


def test_bad_inputs(tokenizer):
    net = C.SentimentClassifier(tokenizer.vocab_size, 8, embed_dim=16, num_heads=2, ffn_dim=32)
    with pytest.raises(ValueError, match=r"input_ids must have shape \(batch, seq\)"):
        net(ms.Tensor(np.ones((8,), np.int32)))
    with pytest.raises(ValueError, match="has 9 tokens per row but the model was built with max_len=8"):
        net(ms.Tensor(np.ones((1, 9), np.int32)))
    with pytest.raises(ValueError, match="No examples given"):
        C.review_dataset([], tokenizer, 8, 4)
    with pytest.raises(ValueError, match="make no full batch"):
        C.review_dataset([("好", 1)], tokenizer, 8, 4, drop_remainder=True)
