"""course_lib.sft: the chat-format SFT data (loss only on the answer) and scoring classifier."""
import numpy as np
import pytest
import mindspore as ms
from mindspore import Parameter, Tensor, nn, ops
from mindspore.train import Callback

from course_lib.data import LABELS
from course_lib.pipelines import IGNORE_INDEX
from course_lib import sft

REVIEWS = [("房间很干净，服务也很好。", 1), ("质量太差了，不推荐。", 0), ("还行吧", 1)]


def test_labels_ignore_the_prompt_and_padding(tokenizer):
    max_len = 48
    text, label = REVIEWS[0]
    inputs, labels = sft.encode_example(tokenizer, text, label, max_len)
    assert inputs.shape == labels.shape == (max_len,) and inputs.dtype == np.int32
    full = tokenizer.encode(tokenizer.format_chat(sft.instruction(text), LABELS[label]))
    n = 1 + len(full)                                       # <bos> + exchange
    assert inputs[0] == tokenizer.bos_id and inputs[1] == tokenizer.user_id
    assert list(inputs[1:n]) == full and all(inputs[n:] == tokenizer.pad_id)
    kept = labels != IGNORE_INDEX
    # learned tokens: exactly the answer and its closing <|end|>, as the next tokens
    assert tokenizer.decode(labels[kept], skip_special=False) == LABELS[label] + "<|end|>"
    answer_start = full.index(tokenizer.assistant_id) + 1   # in `full`; +1 for <bos>
    assert np.flatnonzero(kept).tolist() == list(range(answer_start, n - 1))
    assert all(labels[kept] == inputs[np.flatnonzero(kept) + 1])   # shifted by one
    assert np.all(labels[: answer_start] == IGNORE_INDEX)


def test_long_reviews_are_cut_to_fit_and_keep_the_answer(tokenizer):
    max_len = 40
    long_review = "这本书的内容非常丰富，" * 60
    kept = sft.fit_review(tokenizer, long_review, max_len)
    assert long_review.startswith(kept) and 0 < len(kept) < len(long_review)
    ids, _ = tokenizer.encode_chat(sft.instruction(kept), "正面")
    assert len(ids) <= max_len + 1
    # one more character would not fit (the cut is as long as possible)
    more, _ = tokenizer.encode_chat(sft.instruction(long_review[: len(kept) + 1]), "正面")
    assert len(more) > max_len + 1
    inputs, labels = sft.encode_example(tokenizer, long_review, 1, max_len)
    assert tokenizer.decode(labels[labels != IGNORE_INDEX], skip_special=False) == "正面<|end|>"
    assert sft.fit_review(tokenizer, "好", max_len) == "好"      # short reviews untouched


def test_bad_inputs(tokenizer):
    with pytest.raises(ValueError, match="cannot even hold the prompt"):
        sft.encode_example(tokenizer, "好", 1, max_len=10)
    with pytest.raises(ValueError, match="label must be 0"):
        sft.encode_example(tokenizer, "好", 2, max_len=48)
    with pytest.raises(TypeError, match="must be a str"):
        sft.fit_review(tokenizer, 123, 48)
    with pytest.raises(ValueError, match="No examples"):
        sft.build_sft_arrays(tokenizer, [], 48)
    with pytest.raises(TypeError, match="wrap a single review"):
        sft.answer_logprobs(None, tokenizer, "好", 48)


def test_sft_dataset_batches(tokenizer):
    data = sft.sft_dataset(tokenizer, REVIEWS * 3, max_len=48, batch_size=4, shuffle=False)
    batches = list(data.create_tuple_iterator(output_numpy=True))
    assert len(batches) == 2
    x, y = batches[0]
    assert x.shape == y.shape == (4, 48) and x.dtype == np.int32 and y.dtype == np.int32
    ref_x, ref_y = sft.encode_example(tokenizer, *REVIEWS[0], 48)
    assert np.array_equal(x[0], ref_x) and np.array_equal(y[0], ref_y)


class BigramLM(nn.Cell):
    """logits[b, t] = emb[input_ids[b, t]] @ out: a bigram model whose next-token
    log-probabilities are computable by hand."""

    def __init__(self, emb, out):
        super().__init__()
        self.emb = Parameter(Tensor(emb, ms.float32), name="emb")
        self.out = Parameter(Tensor(out, ms.float32), name="out")

    def construct(self, input_ids):
        return ops.matmul(ops.gather(self.emb, input_ids, 0), self.out)


def log_softmax(z):
    z = z - z.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def test_answer_logprobs_equal_a_hand_computation(tokenizer):
    rng = np.random.default_rng(0)
    V = tokenizer.vocab_size
    emb = rng.standard_normal((V, 16)).astype(np.float32)
    out = rng.standard_normal((16, V)).astype(np.float32)
    model = BigramLM(emb, out)
    texts = [t for t, _ in REVIEWS]
    got = sft.answer_logprobs(model, tokenizer, texts, max_len=48, batch_size=3)

    def lp(prev, nxt):
        return log_softmax(emb[prev].astype(np.float64) @ out.astype(np.float64))[nxt]

    for i, text in enumerate(texts):
        for j, answer in enumerate(LABELS):
            ids, mask = tokenizer.encode_chat(sft.instruction(text), answer)
            want = sum(lp(ids[t - 1], ids[t]) for t in range(1, len(ids)) if mask[t])
            assert abs(got[i, j] - want) < 1e-3, (text, answer)
    assert list(sft.predict_label(model, tokenizer, texts, 48)) == list(got.argmax(-1))


def test_accuracy_of_a_model_that_always_says_positive(tokenizer):
    V = tokenizer.vocab_size
    emb, out = np.zeros((V, 1), np.float32), np.zeros((1, V), np.float32)
    emb[tokenizer.assistant_id, 0] = 1.0
    out[0, tokenizer.encode("正")[0]] = 5.0          # favour 正 right after <|assistant|>
    model = BigramLM(emb, out)
    assert list(sft.predict_label(model, tokenizer, [t for t, _ in REVIEWS], 48)) == [1, 1, 1]
    assert sft.accuracy(model, tokenizer, REVIEWS, 48) == pytest.approx(2 / 3)


def test_scores_of_a_real_causal_lm_do_not_depend_on_padding(tokenizer):
    """Right padding to max_len (and batching with other texts) gives the same score as
    running the exact, unpadded exchange alone."""
    from course_lib.internlm import InternLMForCausalLM, tiny
    model = InternLMForCausalLM(tiny(hidden_size=32, num_layers=1, num_heads=2,
                                     intermediate_size=64, max_seq_len=128))
    texts = [t for t, _ in REVIEWS]
    got = sft.answer_logprobs(model, tokenizer, texts, max_len=64, batch_size=4)
    eager = sft.answer_logprobs(model, tokenizer, texts, max_len=64, batch_size=5,
                                mode="pynative")
    np.testing.assert_allclose(got, eager, rtol=1e-5, atol=1e-4)
    for i, text in enumerate(texts):
        for j, answer in enumerate(LABELS):
            ids, mask = tokenizer.encode_chat(sft.instruction(text), answer)
            logits = model(Tensor([ids[:-1]], ms.int32)).asnumpy()[0].astype(np.float64)
            lp = log_softmax(logits)
            want = sum(lp[t - 1, ids[t]] for t in range(1, len(ids)) if mask[t])
            assert abs(got[i, j] - want) < 1e-4


class EventCounter(Callback):
    def __init__(self):
        self.counts = {}

    def _count(self, name):
        self.counts[name] = self.counts.get(name, 0) + 1

    def on_train_begin(self, run_context):
        self._count("on_train_begin")

    def on_train_step_end(self, run_context):
        self._count("on_train_step_end")

    def on_train_end(self, run_context):
        self._count("on_train_end")


def test_finetune_lora_vs_full_measures_what_it_trains(tokenizer):
    from course_lib.internlm import InternLMForCausalLM, tiny
    cfg = tiny(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64, max_seq_len=64)
    examples = REVIEWS * 4
    runs = {}
    for method in ("lora", "full"):
        ms.set_seed(0)
        model = InternLMForCausalLM(cfg)
        before = {p.name: p.asnumpy().copy() for p in model.get_parameters()}
        events = EventCounter()
        run = sft.finetune(model, tokenizer, examples, method=method, r=2, alpha=4,
                           steps=3, batch_size=4, max_len=48, warmup_steps=1, lr=1e-2,
                           callbacks=[events])
        # one training run = one on_train_begin/on_train_end (one progress bar that completes)
        assert events.counts == {"on_train_begin": 1, "on_train_step_end": 3, "on_train_end": 1}
        assert run.compile_seconds > 0
        changed = {p.name for p in model.get_parameters()
                   if p.name in before and not np.array_equal(before[p.name], p.asnumpy())}
        runs[method] = (run, changed, before)
        assert len(run.history["loss"]) == 3 and run.step_seconds > 0
        # AdamW keeps two float32 moments per trainable parameter
        assert run.optimizer_state_bytes == 2 * 4 * run.trainable
    lora_run, lora_changed, _ = runs["lora"]
    full_run, full_changed, before = runs["full"]
    assert lora_changed == set()                        # every base weight bit-identical
    assert lora_run.trainable == 1 * 2 * 2 * (32 + 32)  # 1 layer x (q, v) x r x (in + out)
    assert full_run.trainable == full_run.total == sum(v.size for v in before.values())
    assert full_changed == set(before)
    assert lora_run.total == full_run.total + lora_run.trainable
    with pytest.raises(ValueError, match="method must be"):
        sft.finetune(InternLMForCausalLM(cfg), tokenizer, examples, method="qlora")
