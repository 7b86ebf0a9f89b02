"""Dynamic batching vs one request at a time, the decode step one change at a time, MINDIR vs
the live Cell in GRAPH mode — measured side by side in one run.

    .venv/bin/python benchmarks/bench_dynamic_batching.py [--requests 32 --max-batch 8
        --rate 20 --min-new 8 --max-new 32 --repeats 2 --no-zoo]

1. Serving: the same requests (news prompts of 4-24 tokens, budgets in [min-new, max-new],
   Poisson arrivals at --rate requests/s; --rate 0 = all at once) go through
   ``inference.serve`` with ``max_batch=1`` and ``max_batch=--max-batch``, alternately,
   --repeats times; the best repeat of each is kept. Prints throughput, mean and p90
   latency and their ratios, and checks that both produce the same tokens.
2. Decode step, median seconds per step on one batch of 8 prompts, as notebook 12 does: the
   cache together with what runs the step (PyNative ``decode_step`` with a growing cache vs
   the layers' ``DecodeEngine`` with a static cache, run op by op: two changes), the mode
   alone (that engine in PyNative vs compiled in GRAPH), the engine (GRAPH ``DecodeEngine``
   vs ``FoldedEngine``, which differ in several ways).
3. Deployment: median forward latency of the live Cell compiled in GRAPH mode vs its MINDIR
   export (the same mode: only the format differs).
0. First, PyNative's operator dispatch: ``decode_step`` time with the default asynchronous
   dispatch vs ``ms.runtime.launch_blocking()``, each in a fresh process. The rest runs
   with launch_blocking unless --async-dispatch.

The model is the zoo's news-pretrained InternLM-tiny (trained and cached on first use;
--no-zoo uses a random one of the same size). A busy machine slows every variant, so only
the ratios mean something. This is not a test.
"""
import argparse
import time

import numpy as np

import course_lib as cl
from course_lib import experiments, inference
from course_lib.data import news_splits
from course_lib.generation import generate
from course_lib.runtime import execution_mode


def best(reports):
    return max(reports, key=lambda r: r.throughput)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--max-batch", type=int, default=8)
    ap.add_argument("--rate", type=float, default=20.0, help="requests/s; 0 = all arrive at once")
    ap.add_argument("--min-new", type=int, default=8)
    ap.add_argument("--max-new", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--no-zoo", action="store_true", help="random weights instead of the zoo model")
    ap.add_argument("--async-dispatch", action="store_true",
                    help="keep PyNative's default asynchronous dispatch (default: launch_blocking)")
    args = ap.parse_args()
    # 0. PyNative dispatch, measured in two fresh processes (the switch is once per process)
    async_ms = experiments.pynative_dispatch_ms(blocking=False)
    blocking_ms = experiments.pynative_dispatch_ms(blocking=True)
    cl.setup(device="CPU", seed=0, quiet=True)
    if not args.async_dispatch:
        import mindspore as ms
        ms.runtime.launch_blocking()

    from course_lib.tokenizer import load_tokenizer
    if args.no_zoo:
        from course_lib.internlm import InternLMForCausalLM, tiny
        model, tok = InternLMForCausalLM(tiny()), load_tokenizer()
    else:
        from course_lib import zoo
        model, tok, _ = zoo.load_or_train("internlm-tiny", progress=False)
    model.set_train(False)

    rng = np.random.default_rng(0)
    sentences = [s for s in news_splits().test if len(s) > 40][: args.requests]
    prompts = [tok.encode(s)[: int(rng.integers(4, 25))] for s in sentences]
    budgets = rng.integers(args.min_new, args.max_new + 1, len(prompts)).tolist()
    arrivals = (inference.poisson_arrivals(len(prompts), args.rate, seed=0) if args.rate > 0
                else None)
    requests = inference.make_requests(prompts, budgets, arrivals)

    # 1. serving, interleaved
    runs = {1: [], args.max_batch: []}
    for _ in range(args.repeats):
        for mb in runs:
            runs[mb].append(inference.serve(model, requests, max_batch=mb, eos_id=tok.eos_id,
                                            pad_id=tok.pad_id))
    one, dyn = best(runs[1]), best(runs[args.max_batch])
    same = one.tokens_by_id() == dyn.tokens_by_id()
    print(f"# {len(requests)} requests, {one.tokens} tokens, rate "
          f"{args.rate or 'all at once'} req/s, best of {args.repeats}")
    print("one at a time   :", one)
    print("dynamic batching:", dyn)
    print(f"same tokens: {same}")

    # 2. decode step, one change at a time
    batch = prompts[:8]
    new = 16
    growing = float(np.median(experiments.pynative_step_seconds(model, batch, new)))
    static = {(engine, mode): experiments.static_generate(model, batch, new, mode=mode, engine=engine)
              for engine, mode in (("layers", "pynative"), ("layers", "graph"), ("folded", "graph"))}
    for run in static.values():
        assert run.tokens == generate(model, batch, new), f"{run.engine}/{run.mode} changed the tokens"

    # 3. MINDIR vs live
    from mindspore import Tensor
    from course_lib import export
    info = export.export_mindir(model, (1, 64), cl.cache_dir("bench") / "dyn_batch_lm")
    t0 = time.perf_counter()
    lm = export.load_mindir(info.path)
    load_s = time.perf_counter() - t0
    x = Tensor(rng.integers(7, tok.vocab_size, (1, 64)).astype(np.int32))

    def median(fn, n=20):
        fn()
        ts = []
        for _ in range(n):
            t = time.perf_counter(); fn(); ts.append(time.perf_counter() - t)
        return float(np.median(ts))
    with execution_mode("graph"):
        live_s, mindir_s = median(lambda: model(x).asnumpy()), median(lambda: lm(x).asnumpy())

    lat1, latd = np.asarray(one.latencies), np.asarray(dyn.latencies)
    print("\n# ratios (same run; PyNative dispatch: "
          f"{'asynchronous' if args.async_dispatch else 'launch_blocking'})")
    print(f"decode step async / blocking dispatch: {async_ms / blocking_ms:.1f}x "
          f"({async_ms:.1f} ms vs {blocking_ms:.1f} ms, fresh processes)")
    print(f"throughput dynamic / one-at-a-time : {dyn.throughput / one.throughput:.2f}x")
    print(f"mean latency one-at-a-time / dynamic: {lat1.mean() / latd.mean():.2f}x")
    print(f"p90 latency one-at-a-time / dynamic : {np.percentile(lat1, 90) / np.percentile(latd, 90):.2f}x")
    lp, lg, fg = (static[k].median_step for k in (("layers", "pynative"), ("layers", "graph"),
                                                  ("folded", "graph")))
    print(f"decode step, cache + engine shell (PyNative decode_step / layers engine): "
          f"{growing / lp:.2f}x ({growing * 1e3:.1f} ms vs {lp * 1e3:.1f} ms)")
    print(f"decode step, the mode alone (layers engine PyNative / GRAPH): {lp / lg:.1f}x "
          f"({lp * 1e3:.1f} ms vs {lg * 1e3:.1f} ms; compile {static[('layers', 'graph')].compile_seconds:.1f} s)")
    print(f"decode step, the engine (GRAPH layers / folded; the engines differ in several ways): {lg / fg:.2f}x "
          f"({lg * 1e3:.1f} ms vs {fg * 1e3:.1f} ms)")
    print(f"forward live Cell / MINDIR, both GRAPH: {live_s / mindir_s:.2f}x "
          f"({live_s * 1e3:.1f} ms vs {mindir_s * 1e3:.1f} ms; MINDIR {info.bytes / 2**20:.1f} MiB, "
          f"loaded in {load_s:.2f} s)")


if __name__ == "__main__":
    main()
