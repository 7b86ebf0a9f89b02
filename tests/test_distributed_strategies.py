"""Parallel strategies: the Ascend configuration really lands on the course model (the
attributes MindSpore's parallel compiler reads), recomputation keeps gradients exact on
CPU, and the CPU build's refusal of semi-auto parallel is captured verbatim."""
import numpy as np
import pytest

import mindspore as ms
from mindspore import Tensor, nn, ops

from course_lib.baichuan import BaichuanForCausalLM, tiny
from course_lib.distributed import strategies as st


def small(**kw):
    cfg = dict(hidden_size=32, num_layers=4, num_heads=4, intermediate_size=64, vocab_size=64,
               max_seq_len=32)
    cfg.update(kw)
    return BaichuanForCausalLM(tiny(**cfg))


@pytest.fixture
def clean_context():
    yield
    ms.reset_auto_parallel_context()


def test_strategy_table_covers_the_five_ideas():
    names = [s.name for s in st.STRATEGIES]
    assert names == ["data parallel", "tensor parallel", "pipeline parallel",
                     "optimizer parallel", "recomputation"]
    runs = {s.name for s in st.STRATEGIES if s.on_cpu.startswith("runs")}
    assert runs == {"data parallel", "recomputation"}


def test_tensor_parallel_plan_is_megatron_column_then_row():
    model = small(num_layers=2)
    plan = st.tensor_parallel_plan(model)
    assert plan["lm_head"] == "column"
    for i in range(2):
        p = f"model.layers.{i}."
        assert plan[p + "self_attn.W_pack"] == "column"
        assert plan[p + "mlp.gate_proj"] == plan[p + "mlp.up_proj"] == "column"
        assert plan[p + "self_attn.o_proj"] == plan[p + "mlp.down_proj"] == "row"
    # every Dense of the model is in the plan: 5 per layer + lm_head
    assert len(plan) == sum(isinstance(c, nn.Dense) for _, c in model.cells_and_names()) == 11


def test_shard_sets_the_strategies_the_compiler_reads():
    model = small(num_layers=1)
    st.shard_tensor_parallel(model, dp=2, mp=4)
    layer = model.model.layers[0]
    assert layer.self_attn.W_pack.matmul.attrs["in_strategy"] == ((2, 1), (4, 1))
    assert layer.mlp.down_proj.matmul.attrs["in_strategy"] == ((2, 4), (1, 4))
    assert model.lm_head.matmul.attrs["in_strategy"] == ((2, 1), (4, 1))


def test_shard_with_biases_splits_them_like_the_outputs():
    from course_lib.internlm import InternLMForCausalLM, tiny as internlm_tiny
    model = InternLMForCausalLM(internlm_tiny(hidden_size=32, num_layers=1, num_heads=4,
                                              intermediate_size=64, vocab_size=64))
    st.shard_tensor_parallel(model, dp=1, mp=2)
    attn = model.model.layers[0].self_attn
    assert attn.q_proj.bias_add.attrs["in_strategy"] == ((1, 2), (2,))
    assert attn.o_proj.bias_add.attrs["in_strategy"] == ((1, 1), (1,))


@pytest.mark.parametrize("mp, match", [(3, "does not divide num_heads=4"),
                                       (0, "must be a positive int")])
def test_tensor_parallel_rejects_ragged_splits(mp, match):
    with pytest.raises(ValueError, match=match):
        st.shard_tensor_parallel(small(num_layers=1), dp=1, mp=mp)


def test_pipeline_stages_spread_layers_evenly():
    model = small(num_layers=5)
    assert st.assign_pipeline_stages(model, 2) == [0, 0, 0, 1, 1]
    assert model.model.embed_tokens.pipeline_stage == 0
    assert [l.pipeline_stage for l in model.model.layers] == [0, 0, 0, 1, 1]
    assert model.lm_head.pipeline_stage == model.model.norm.pipeline_stage == 1
    with pytest.raises(ValueError, match="between 1 and the number of layers"):
        st.assign_pipeline_stages(model, 6)


def test_parallel_context_reads_back(clean_context):
    ctx = st.configure_ascend(small(num_layers=2), dp=2, mp=2, pp=2)
    assert ctx["device_num"] == 8
    assert ms.get_auto_parallel_context("parallel_mode") == "semi_auto_parallel"
    assert ms.get_auto_parallel_context("pipeline_stages") == 2
    assert ms.get_auto_parallel_context("enable_parallel_optimizer") is True
    dp_only = st.parallel_context(dp=8, optimizer_shard=False)
    assert dp_only == dict(parallel_mode="data_parallel", gradients_mean=True)
    with pytest.raises(ValueError, match="pp must be a positive int"):
        st.parallel_context(dp=2, pp=0)


def _grads(model, ids, labels):
    from course_lib.training import LossCell
    loss_net = LossCell(model)
    weights = ms.ParameterTuple(model.trainable_params())

    class Grads(nn.Cell):
        def __init__(self):
            super().__init__(auto_prefix=False)
            self.net, self.grad = loss_net, ops.GradOperation(get_by_list=True)

        def construct(self, x, y):
            return self.grad(self.net, weights)(x, y)
    return [g.asnumpy() for g in Grads()(ids, labels)]


def test_recompute_runs_on_cpu_and_keeps_gradients_exact():
    from course_lib.runtime import execution_mode
    rng = np.random.default_rng(0)
    ids = Tensor(rng.integers(0, 64, (2, 16)).astype(np.int32))
    labels = Tensor(rng.integers(0, 64, (2, 16)).astype(np.int32))
    with execution_mode("graph"):
        ms.set_seed(1)
        plain = small(num_layers=2)
        ms.set_seed(1)
        recomputed = small(num_layers=2)
        assert st.enable_recompute(recomputed) == 2
        assert all(l._has_config_recompute for l in recomputed.model.layers)
        g_plain, g_re = _grads(plain, ids, labels), _grads(recomputed, ids, labels)
    assert len(g_plain) == len(g_re) > 0
    assert max(np.abs(a).max() for a in g_plain) > 0
    assert max(float(np.abs(a - b).max()) for a, b in zip(g_plain, g_re)) < 1e-6


@pytest.mark.slow
def test_cpu_refuses_semi_auto_parallel_and_we_show_the_real_error():
    text = st.cpu_refusal()
    assert "semi_auto_parallel" in text and "only support Ascend/GPU" in text


@pytest.mark.slow
def test_every_refusal_the_table_claims_is_run_and_real():
    """The strategy table says what the CPU build refuses: each attempt really raises it."""
    found = st.cpu_refusals()
    assert list(found) == list(st.REFUSAL_ATTEMPTS)
    for name in ("tensor parallel", "pipeline parallel", "optimizer parallel, SEMI_AUTO_PARALLEL"):
        assert "semi_auto_parallel" in found[name] and "only support Ascend/GPU" in found[name], name
    data_parallel = found["optimizer parallel, DATA_PARALLEL"]
    assert 'only supports "Ascend" in data parallel mode' in data_parallel, data_parallel
    refused = {s.name for s in st.STRATEGIES if s.on_cpu.startswith("refused")}
    assert refused == {name.split(",")[0] for name in st.REFUSAL_ATTEMPTS}
    with pytest.raises(ValueError, match="Unknown attempts"):
        st.cpu_refusals(["zero-4"])
