"""course_lib.experiments: the decode-time measurement decodes exactly what ``generate`` does
(with and without the KV cache) and reports one timing per generated step. No timed asserts."""
import numpy as np
import pytest

from course_lib import baichuan
from course_lib.baichuan import BaichuanForCausalLM
from course_lib.experiments import decode_ms_by_position
from course_lib.generation import generate

PROMPT = [11, 12, 13, 14, 15]


@pytest.fixture(scope="module")
def model():
    import course_lib as cl
    cl.seed_everything(0)
    return BaichuanForCausalLM(baichuan.tiny(hidden_size=32, num_layers=2, num_heads=4))


@pytest.mark.parametrize("use_cache, compiled", [(True, True), (True, False), (False, True)])
def test_decode_times_follow_generate(model, use_cache, compiled):
    """The compiled engine, the PyNative growing cache and the recompute decode the same ids."""
    run = decode_ms_by_position(model, PROMPT, 6, use_cache=use_cache, compiled=compiled)
    assert run.tokens == generate(model, [PROMPT], 6)[0]
    assert run.positions.tolist() == [6, 7, 8, 9, 10]      # prompt 5 + each fed token
    assert run.ms.shape == (5,) and np.all(run.ms > 0) and run.use_cache == use_cache
    assert run.compiled == (use_cache and compiled)


def test_repeats_keep_the_fastest_time_per_position(model):
    run = decode_ms_by_position(model, PROMPT, 4, repeats=2)
    assert run.tokens == generate(model, [PROMPT], 4)[0] and run.ms.shape == (3,)


def test_decode_times_errors(model):
    with pytest.raises(ValueError, match="max_seq_len"):
        decode_ms_by_position(model, PROMPT, 10_000)
    with pytest.raises(ValueError, match="repeats >= 1"):
        decode_ms_by_position(model, PROMPT, 4, repeats=0)
