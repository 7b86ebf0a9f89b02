"""course_lib.experiments: the decode-time measurement decodes exactly what ``generate`` does
(with and without the KV cache) and reports one timing per generated step. No timed asserts."""
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from course_lib import baichuan, experiments
from course_lib.baichuan import BaichuanForCausalLM
from course_lib.experiments import CpuShare, decode_ms_by_position
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


def test_static_generate_counts_the_graphs_its_decode_loop_compiles():
    """GRAPH compiles the engine's step once, later runs of the same shapes reuse it, PyNative
    compiles none: counted from MindSpore's compile caches (``StaticRun.graphs``)."""
    import course_lib as cl
    cl.seed_everything(0)
    fresh = BaichuanForCausalLM(baichuan.tiny(hidden_size=32, num_layers=2, num_heads=4))
    prompts = [PROMPT, [3, 4, 5]]
    runs = [experiments.static_generate(fresh, prompts, 5, mode=mode, engine="layers")
            for mode in ("graph", "graph", "pynative")]
    assert [r.graphs for r in runs] == [1, 0, 0]
    assert runs[0].tokens == runs[1].tokens == runs[2].tokens == generate(fresh, prompts, 5)


def test_repeats_keep_the_fastest_time_per_position(model):
    run = decode_ms_by_position(model, PROMPT, 4, repeats=2)
    assert run.tokens == generate(model, [PROMPT], 4)[0] and run.ms.shape == (3,)


def test_decode_times_errors(model):
    with pytest.raises(ValueError, match="max_seq_len"):
        decode_ms_by_position(model, PROMPT, 10_000)
    with pytest.raises(ValueError, match="repeats >= 1"):
        decode_ms_by_position(model, PROMPT, 4, repeats=0)


def test_decode_in_turns_alternates_the_settings_and_keeps_each_positions_fastest(model, monkeypatch):
    from course_lib import experiments
    calls, fake_ms = [], iter([[3.0, 1.0], [2.0, 5.0], [4.0, 4.0], [1.0, 9.0], [6.0, 6.0], [5.0, 0.5]])

    def fake(model, prompt_ids, new_tokens, use_cache, compiled, warmup):
        calls.append((use_cache, warmup))
        return experiments.DecodeTimes(use_cache, False, np.array([6, 7]), np.array(next(fake_ms)), [], (0.0,))
    monkeypatch.setattr(experiments, "decode_ms_by_position", fake)
    settings = {name: dict(model=model, prompt_ids=PROMPT, new_tokens=3, use_cache=name == "with", compiled=False)
                for name in ("with", "without")}
    runs = experiments.decode_ms_in_turns(settings, rounds=3)
    assert calls == [(True, True), (False, True), (False, False), (True, False), (True, False), (False, False)]
    assert runs["with"].ms.tolist() == [1.0, 1.0] and runs["without"].ms.tolist() == [2.0, 0.5]
    with pytest.raises(ValueError, match="rounds must be an int >= 1"):
        experiments.decode_ms_in_turns(settings, rounds=0)



def _burn(cpu_seconds: float) -> None:
    """Spin until this process has used ``cpu_seconds`` of CPU (not wall) time."""
    start = time.process_time()
    while time.process_time() - start < cpu_seconds:
        pass


def _cpu_of(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` has used so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="CpuShare reads Linux /proc/stat")
def test_cpu_share_tells_this_process_from_the_others():
    """CPU seconds, not shares, so a busy machine cannot change the outcome: another process's
    0.5 s lands in ``others`` while we only wait, a spin here lands in ``own``, and a child we
    wait for counts as ours (16's runners each run in a process of their own)."""
    child = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        with CpuShare() as watching:
            while _cpu_of(child.pid) < 0.5:
                time.sleep(0.02)
    finally:
        child.kill()
        child.wait()
    with CpuShare() as spinning:
        _burn(0.5)
    with CpuShare() as waiting:
        subprocess.run([sys.executable, "-c", "import time\nstart = time.process_time()\n"
                        "while time.process_time() - start < 0.5: pass"], check=True)
    assert watching.others * watching.wall >= 0.4 and watching.own * watching.wall < 0.3
    assert spinning.own * spinning.wall >= 0.45
    assert waiting.own * waiting.wall >= 0.45
    assert "this kernel" in spinning.summary()


def test_cpu_share_says_when_it_cannot_tell(monkeypatch):
    monkeypatch.setattr(experiments, "_cpu_seconds", lambda: None)
    with CpuShare() as share:
        pass
    assert share.own is None and "cannot tell" in share.summary()
