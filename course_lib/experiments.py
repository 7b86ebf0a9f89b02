"""Measurements that notebooks plot and benchmarks print (kept out of the teaching modules).

* ``decode_ms_by_position`` — milliseconds per generated token at each position, with the
  KV cache (the compiled decode step ``generate`` uses, or the PyNative step with a growing
  cache: flat) or without it (the whole sequence recomputed every step in PyNative: grows
  with the position) — benchmarks/bench_kv_cache.py; ``decode_ms_in_turns`` runs several
  such settings in alternating rounds — notebook 07's plot and width comparison;
* ``static_generate`` / ``pynative_step_seconds`` — seconds per decode step of an engine
  with a static cache (``engine``: the layers' ``DecodeEngine`` or the ``FoldedEngine``; run
  in PyNative or GRAPH mode) and of the PyNative growing-cache step (notebook 12 times the
  layers' engine in both modes: the mode is the one change; bench_dynamic_batching.py prints
  the other rows too);
* ``pynative_dispatch_ms`` — PyNative's asynchronous vs blocking operator dispatch, each in
  a fresh process (``python -m course_lib.experiments --time-decode STEPS BATCH``);
* ``CpuShare`` — how many cores this process and everything else used while a ``with`` block
  ran, printed beside timings (a load average counts the timing's own threads too).

Timings depend on the machine and its load: compare curves measured in the same run, never
assert on them in tests.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass, replace

import numpy as np

from .generation import cache_bucket, compiled_prefill, decode_step, eos_set, prefill
from .runtime import turn_order


@dataclass
class DecodeTimes:
    use_cache: bool
    compiled: bool                 # with the cache: the compiled engine (else PyNative)
    positions: np.ndarray          # sequence length after each timed step
    ms: np.ndarray                 # milliseconds of that step
    tokens: list                   # the generated ids (greedy), for the same-output check
    load_average: tuple            # 1/5/15-minute load average before the run

    @property
    def total_seconds(self) -> float:
        return float(self.ms.sum()) / 1000


def decode_ms_by_position(model, prompt_ids, new_tokens: int, use_cache: bool = True,
                          warmup: bool = True, repeats: int = 1,
                          compiled: bool = True) -> DecodeTimes:
    """Greedy-decode ``new_tokens`` after ``prompt_ids`` (one sequence) and time every step;
    with ``repeats`` > 1 the whole decode runs that many times and each position keeps its
    fastest time (a busy machine's spikes do not survive the minimum).

    With the cache the step is ``generate``'s compiled engine (``warmup`` first runs it once
    so compilation is not on the curve), or with ``compiled=False`` the PyNative step whose
    ``KVCache`` grows by one row per token (``generation.decode_step``); without the cache
    every step recomputes the whole sequence in PyNative mode, like ``generate(...,
    use_cache=False)``. ``compiled=False`` against ``use_cache=False`` changes one thing:
    the cache."""
    prompt = [int(t) for t in prompt_ids]
    total = len(prompt) + new_tokens
    if new_tokens < 2 or total > model.config.max_seq_len or repeats < 1:
        raise ValueError(f"need 2 <= new_tokens, prompt + new_tokens <= max_seq_len="
                         f"{model.config.max_seq_len} and repeats >= 1, got {len(prompt)} + "
                         f"{new_tokens}, repeats {repeats}")
    load = os.getloadavg()
    engine = use_cache and compiled
    slots = cache_bucket(total, model.config.max_seq_len) if engine else None
    if engine and warmup:
        compiled_prefill(model, [prompt], slots)
    runs = [_timed_greedy(model, prompt, new_tokens, use_cache, slots) for _ in range(repeats)]
    tokens, positions, _ = runs[0]
    ms = np.min([r[2] for r in runs], 0)
    return DecodeTimes(use_cache, engine, np.asarray(positions), ms, tokens, load)


def decode_ms_in_turns(settings: dict, rounds: int = 3) -> dict:
    """{name: DecodeTimes}: ``settings`` maps a name to the keyword arguments of
    ``decode_ms_by_position`` (``model``, ``prompt_ids``, ``new_tokens``, ``use_cache``,
    ``compiled``). Each setting decodes once per round, the settings taking turns and the order
    reversed every other round (``runtime.turn_order``); each position keeps its fastest time
    of the rounds. ``repeats`` runs one setting's decodes back to back, so a load that comes or
    goes can fall on one setting only; here it falls on all of them."""
    if not isinstance(rounds, int) or rounds < 1:
        raise ValueError(f"rounds must be an int >= 1, got {rounds!r}")
    done: dict = {name: [] for name in settings}
    for r in range(rounds):
        for name in turn_order(settings, r):
            done[name].append(decode_ms_by_position(**settings[name], warmup=r == 0))
    return {name: replace(runs[0], ms=np.min([run.ms for run in runs], 0))
            for name, runs in done.items()}


def _timed_greedy(model, prompt, new_tokens, use_cache: bool, slots):
    """(tokens, positions, ms per step) of one greedy decode: the compiled engine when
    ``slots`` is given, else PyNative with or without a growing cache."""
    if slots is None:
        state = prefill(model, [prompt], use_cache=use_cache)
    else:
        state = compiled_prefill(model, [prompt], slots)
    tokens, positions, ms = [], [], []
    for _ in range(new_tokens - 1):
        tokens.append(int(np.argmax(state.logits[0])))
        start = time.perf_counter()
        decode_step(model, state, [tokens[-1]])
        ms.append(1000 * (time.perf_counter() - start))
        positions.append(state.input_ids.shape[1])
    tokens.append(int(np.argmax(state.logits[0])))
    return tokens, positions, np.asarray(ms)


@dataclass
class StaticRun:
    tokens: list                   # new ids per prompt (cut after EOS)
    mode: str
    compile_seconds: float         # the first decode call (includes graph compilation)
    step_seconds: list             # every later decode call
    engine: str = "layers"         # which engine decoded: "layers" (DecodeEngine) or "folded"
    graphs: int = 0                # graphs compiled during the decode loop (0: all reused)

    @property
    def median_step(self) -> float:
        return float(np.median(self.step_seconds)) if self.step_seconds else float("nan")


def static_generate(model, prompts_ids, max_new_tokens: int, *, mode: str = "graph",
                    eos_id=None, pad_id: int = 0, engine: str = "auto") -> StaticRun:
    """Greedy decoding with a static-cache engine, timed per step: prefill with the ordinary
    model (PyNative), move its KV cache into the engine's buffers of length prompt +
    ``max_new_tokens``, then decode with fixed shapes in ``mode`` ("graph" compiles the step
    once; "pynative" runs the same Cell op by op). ``engine`` as in ``generation.generate``:
    "layers" (``DecodeEngine``, the model's own layers), "folded" (``folded.FoldedEngine``)
    or "auto" (what ``generate`` picks; ``StaticRun.engine`` says which ran). Rows that finish
    keep computing (static batch) but their later tokens are discarded."""
    from .generation import engine_kind
    from .migration.compile_stats import compiled_graphs
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    kind = engine_kind(model, engine)
    eos = eos_set(eos_id)
    state = prefill(model, prompts_ids, pad_id)
    width = state.input_ids.shape[1]
    if width + max_new_tokens > model.config.max_seq_len:
        raise ValueError(f"prompt ({width}) + max_new_tokens ({max_new_tokens}) exceeds "
                         f"max_seq_len={model.config.max_seq_len}.")
    state.reserve(model, width + max_new_tokens, engine=kind)
    outputs = [[] for _ in range(state.batch_size)]
    done = [False] * state.batch_size
    compile_s, times = 0.0, []
    graphs_before = compiled_graphs()
    for t in range(max_new_tokens):
        chosen = np.argmax(state.logits, -1).astype(np.int32)
        for i, tok in enumerate(chosen):
            if not done[i]:
                outputs[i].append(int(tok))
                done[i] = int(tok) in eos
        if all(done) or t == max_new_tokens - 1:
            break
        t0 = time.perf_counter()
        decode_step(model, state, chosen, mode=mode)
        elapsed = time.perf_counter() - t0
        if t == 0:
            compile_s = elapsed
        else:
            times.append(elapsed)
    return StaticRun(outputs, mode, compile_s, times, kind, compiled_graphs() - graphs_before)


def pynative_step_seconds(model, prompts_ids, max_new_tokens: int, pad_id: int = 0) -> list:
    """Seconds per ``generation.decode_step`` (PyNative, growing cache) on the same batch."""
    state = prefill(model, prompts_ids, pad_id)
    times = []
    for _ in range(max_new_tokens - 1):
        chosen = np.argmax(state.logits, -1)
        t0 = time.perf_counter()
        decode_step(model, state, chosen)
        times.append(time.perf_counter() - t0)
    return times


# --------------------------------------------------------------------------------------
# PyNative's operator dispatch: asynchronous (default) or blocking
# --------------------------------------------------------------------------------------
def _time_decode(steps: int, batch: int) -> float:
    """Median seconds of ``decode_step`` on a random InternLM-tiny (runs in this process)."""
    import course_lib as cl
    from .internlm import InternLMForCausalLM, tiny
    cl.setup(device="CPU", seed=0, quiet=True)
    model = InternLMForCausalLM(tiny())
    model.set_train(False)
    return float(np.median(pynative_step_seconds(model, [[5, 6, 7, 8, 9, 10]] * batch, steps + 1)))


def pynative_dispatch_ms(blocking: bool, steps: int = 6, batch: int = 8, timeout: float = 300) -> float:
    """Median milliseconds per PyNative ``decode_step`` in a FRESH process, with MindSpore's
    default asynchronous operator dispatch or with ``ms.runtime.launch_blocking()`` (which
    can be switched on only once per process — hence the subprocess)."""
    cmd = [sys.executable, "-m", "course_lib.experiments", "--time-decode", str(steps), str(batch)]
    if blocking:
        cmd.append("--blocking")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, GLOG_v="3"))
    for line in proc.stdout.splitlines():
        if line.startswith("DECODE_MS "):
            return float(line.split()[1])
    raise RuntimeError(f"timing subprocess failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}")


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "--time-decode":
        if "--blocking" in sys.argv:
            import mindspore as ms
            ms.runtime.launch_blocking()
        print(f"DECODE_MS {1000 * _time_decode(int(sys.argv[2]), int(sys.argv[3])):.3f}", flush=True)
    else:
        sys.exit("usage: python -m course_lib.experiments --time-decode STEPS BATCH [--blocking]")


class CpuShare:
    """Where the machine's CPU went during a ``with`` block, in cores: this process (all its
    threads, and the child processes it started and waited for) and every other process
    (Linux ``/proc/stat``; elsewhere ``summary()`` says it cannot tell). A load average is a
    1-minute moving count of runnable threads, this process's own included, so it cannot say
    whether anything else was running; this can."""

    def __enter__(self) -> "CpuShare":
        self._start = _cpu_seconds()
        self.own = self.others = self.wall = None
        return self

    def __exit__(self, *exc) -> None:
        end = _cpu_seconds()
        if self._start is None or end is None:
            return
        self.wall, busy, own = (b - a for a, b in zip(self._start, end))
        self.own = own / self.wall
        self.others = max(0.0, busy - own) / self.wall

    def summary(self) -> str:
        if self.own is None:
            return "CPU use: cannot tell here (needs Linux /proc/stat)"
        return (f"CPU use over the timing, in cores of {os.cpu_count()}: this kernel "
                f"{self.own:.2f}, all other processes {self.others:.2f}")


def _cpu_seconds():
    """(wall, busy seconds of the whole machine, CPU seconds of this process and its waited-for
    children) or None."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)           # idle + iowait
    busy = (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")         # guest time is in user
    t = os.times()
    return time.monotonic(), busy, t.user + t.system + t.children_user + t.children_system
