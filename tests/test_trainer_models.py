"""LLMTrainer with the course's own models (course_lib.internlm / baichuan / generation,
written for chapters 06-08): graph-mode training and evaluation, text generation."""
import importlib

import numpy as np
import pytest

from course_lib.pipelines import BlockSource, make_dataset
from course_lib.trainer import LLMTrainer

@pytest.mark.parametrize("family", ["internlm", "baichuan"])
def test_course_models_train_and_evaluate_in_graph_mode(family):
    """The chapter models must compile inside TrainStep/EvalCell (GRAPH mode)."""
    mod = importlib.import_module(f"course_lib.{family}")
    cls = mod.InternLMForCausalLM if family == "internlm" else mod.BaichuanForCausalLM
    model = cls(mod.tiny(num_layers=1, hidden_size=32, num_heads=2, intermediate_size=64))
    blocks = np.random.default_rng(0).integers(3, 8000, (8, 17)).astype(np.int32)
    data = make_dataset(BlockSource(blocks), 4)
    trainer = LLMTrainer(model, data, data, lr=1e-2, steps=3, mode="graph")
    losses = trainer.train()["loss"]
    assert all(np.isfinite(losses)) and losses[-1] < losses[0]
    assert trainer.evaluate()["perplexity"] < 8000 * 1.5


def test_generate_continues_the_prompt_greedily(tokenizer):
    from course_lib import internlm
    from course_lib.generation import generate
    model = internlm.InternLMForCausalLM(internlm.tiny(num_layers=1, hidden_size=32, num_heads=2,
                                                       intermediate_size=64, max_seq_len=64))
    blocks = np.random.default_rng(0).integers(3, 8000, (8, 17)).astype(np.int32)
    trainer = LLMTrainer(model, make_dataset(BlockSource(blocks), 4), lr=1e-3, steps=2)
    text = trainer.generate(tokenizer, "人民日报", max_new_tokens=5)
    assert text.startswith("人民日报")
    ids = generate(model, [tokenizer.encode("人民日报")], 5, eos_id=tokenizer.eos_id)[0]
    assert text == "人民日报" + tokenizer.decode(ids)
