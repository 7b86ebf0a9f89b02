"""Checkers for notebook 11 (mindnlp / Hugging Face interop).

Notebook 11's kernel imports mindnlp, which patches MindSpore process-wide; these checkers
therefore never run a course model, and this module never imports mindnlp. The LoRA
training-step checker needs mindnlp: inside notebook 11's kernel it runs in place; in any
other process (pytest, ``--self-test``) it re-runs itself in a fresh subprocess that imports
mindnlp, passing the learner's function by its importable name.
"""
from __future__ import annotations

import contextlib
import importlib
import io
import os
import sys

import numpy as np

from ..runtime import run_isolated
from ..solutions import ch11 as sol
from .common import (Mismatch, _record, check_number, close, exercise, hidden_rng, observe,
                     run_code_check, verdict)

STEPS, LR = 3, 0.5


def _tiny_peft_model():
    """A 1-layer Llama with LoRA (r=2) on q_proj/v_proj, built offline from a config."""
    import torch
    from mindnlp.peft import LoraConfig, get_peft_model
    from mindnlp.transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(int(hidden_rng(110).integers(2**31)))          # the hidden initial weights
    base = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32,
                                        num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
                                        max_position_embeddings=32, attention_bias=True))
    model = get_peft_model(base, LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"],
                                            lora_dropout=0.0, task_type="CAUSAL_LM"))
    params = [p for p in model.parameters() if p.requires_grad]
    return model, params


def _as_float(value):
    """The learner's returned loss as a float when it is a number (else as it is)."""
    try:
        return float(np.asarray(value.numpy() if hasattr(value, "numpy") else value))
    except (TypeError, ValueError, AttributeError):
        return value


def _run_steps(func, batches, wants=None):
    """``func``'s losses and LoRA parameters after each step. With ``wants`` (the reference's
    (losses, states)) every step's parameters and loss are observed against them."""
    model, params = _tiny_peft_model()

    def loss_fn(batch):
        return model(input_ids=batch, labels=batch).loss
    losses, states = [], []
    for step, batch in enumerate(batches, 1):
        try:
            loss = func(loss_fn, params, batch, LR)
        except TypeError as err:
            if wants is not None:
                observe(f"第 {step} 步之后的 LoRA 参数", [p.detach().numpy() for p in params],
                        wants[1][step - 1], atol=1e-6, rtol=1e-4)
            if all(p.grad is None for p in params):
                raise Mismatch("p.grad 是 None：在 mindnlp 0.5.1 + CPU 上 loss.backward() 不产生梯度（也不报错），"
                               "第 5 节第二格演示过；能产生梯度的写法在第 5 节练习上面那一格。") from err
            raise
        states.append([p.detach().numpy().copy() for p in params])
        losses.append(loss)
        if wants is not None:
            observe(f"第 {step} 步之后的 LoRA 参数", states[-1], wants[1][step - 1], atol=1e-6, rtol=1e-4)
            observe(f"第 {step} 步返回的损失", _as_float(loss), wants[0][step - 1], atol=1e-5, rtol=1e-4)
    return losses, states


def _step_body(func):
    import torch
    rng = hidden_rng(11)
    batches = [torch.tensor(rng.integers(0, 64, (2, 6)).astype(np.int64)) for _ in range(STEPS)]
    want_losses, want_states = _run_steps(sol.lora_sgd_step, batches)
    got_losses, got_states = _run_steps(func, batches, (want_losses, want_states))
    start = [p.detach().numpy() for p in _tiny_peft_model()[1]]
    for step, (g, w, gl, wl) in enumerate(zip(got_states, want_states, got_losses, want_losses), 1):
        if not close(gl, wl, rel=1e-4, abs_=1e-5):
            raise Mismatch(f"第 {step} 步返回的损失是 {gl!r}，应为 {wl:.5f}：返回这一步算出的损失（float）。")
        if step == 1 and all(np.array_equal(a, b) for a, b in zip(g, start)):
            raise Mismatch("一步之后 LoRA 参数完全没变：梯度没有算出来，或者更新没有写回 params 里的参数本身"
                           "（第 5 节练习上面的说明）。")
        for i, (a, b) in enumerate(zip(g, w)):
            if not np.allclose(a, b, rtol=1e-4, atol=1e-6):
                bug = ("第 1 步正确、之后出错：这一步用的梯度里还留着上一步的（value_and_grad 是累加到 .grad 上的，"
                       "第 5 节练习上面那一格）。"
                       if step > 1 else "第 1 步之后就不同：检查更新的方向和大小（学习率 lr 的 SGD）。")
                raise Mismatch(f"第 {step} 步之后第 {i} 个 LoRA 参数与参照不同（最大差 "
                               f"{float(np.abs(a - b).max()):.3g}）：{bug}")


def _check_with_mindnlp(check: str, module: str, qualname: str) -> dict:
    """Fresh-process side (``runtime.run_isolated``): import mindnlp, run checker ``check``
    on the learner's function, hand back its verdict, what it printed and what it observed."""
    from ..grade.judge import encode_record
    from .common import recording
    os.environ.setdefault("DIFFUSERS_VERBOSITY", "error")
    import mindnlp  # noqa: F401  -- from here on `import torch` means mindtorch
    func = getattr(importlib.import_module(module), qualname)
    printed = io.StringIO()
    with recording() as found, contextlib.redirect_stdout(printed):
        ok = globals()[check](func)
    records = [dict(encode_record(r), provenance=None) for r in found]
    return {"ok": bool(ok), "printed": printed.getvalue(), "records": records}


def _replay(name: str, records: list, lines: list) -> None:
    """Record here the child's call of checker ``name``: its observations, then its verdict."""
    from ..grade.judge import decode_record
    run = next((decode_record(r) for r in records if r.get("exercise") == name), None)
    if run is None:
        _record(name, False, lines[-1] if lines else "子进程没有给出结论。")
        return
    for o in run.observations:
        observe(o.what, o.got, o.want, atol=o.atol, rtol=o.rtol)
    _record(name, run.passed, run.hint, run.attempted)


def _in_fresh_process(name: str, func) -> bool:
    """Run checker ``name`` on ``func`` in a fresh interpreter that imports mindnlp first;
    its observations and verdict are recorded in this process as if it had run here."""
    module, qualname = getattr(func, "__module__", None), getattr(func, "__qualname__", "")
    if module in (None, "__main__") or "<" in qualname:
        return verdict(False, "这个练习要在导入了 mindnlp 的内核里运行（第 11 章笔记本）。", name)
    try:
        result = run_isolated(_check_with_mindnlp, check=name.split(".")[1], module=module,
                              qualname=qualname, timeout=600,
                              env={"HF_HUB_OFFLINE": "1", "DIFFUSERS_VERBOSITY": "error"})
    except RuntimeError as err:
        print(f"[{name}] ❌ 子进程出错：{str(err)[-800:]}")
        _record(name, False, f"子进程出错：{str(err)[-800:]}")
        return False
    lines = [l for l in result["printed"].splitlines() if l.startswith(f"[{name}]")]
    print("\n".join(lines) if lines else f"[{name}] ❌ 子进程没有给出结论。")
    _replay(name, result.get("records", []), lines)
    return result["ok"] and bool(lines)


@exercise("code", "写 lora_sgd_step：mindnlp 0.5.1 + CPU 上 LoRA 参数的一步训练（value_and_grad + 手写 SGD）",
          solution=lambda: sol.lora_sgd_step,
          wrong=((lambda: sol.wrong_backward, "loss.backward() 不产生梯度"),
                 (lambda: sol.wrong_accumulate, "累加")),
          targets=("course_lib.solutions.ch11.lora_sgd_step",),
          taught=("mindtorch.autograd.value_and_grad(loss_fn, params)",),
          question="在第 5 节“练习 2（写代码）：mindnlp 上 LoRA 的一步训练”的脚手架里写 "
                   "`my_lora_sgd_step(loss_fn, params, batch, lr)`："
                   "用 mindnlp 0.5.1 在 CPU 上能用的写法（`mindtorch.autograd.value_and_grad` + 手写 SGD）"
                   "对 LoRA 的可训练参数 `params` 做一步训练（SGD：每个参数减去 `lr` 乘它的梯度，在 `torch.no_grad()` 里原地更新），"
                   "返回这一步的损失（`float`）。`loss_fn(batch)` 返回这一批的损失。检查器在一个 1 层的小 Llama + LoRA 上"
                   "连续调用你的函数 3 步，每一步都与参考实现比较返回的损失和更新后的参数（相对误差 1e-4 以内）。")
def lora_sgd_step(func) -> bool:
    """``func(loss_fn, params, batch, lr)`` -> loss; 3 steps on a tiny LoRA Llama vs the reference."""
    if "mindnlp" not in sys.modules:
        return _in_fresh_process("ch11.lora_sgd_step", func)
    return run_code_check("ch11.lora_sgd_step", "回到第 5 节：mindnlp 0.5.1 + CPU 上哪些写法不能用，能用的写法是哪一种"
                          "（练习上面那一格）。返回这一步的损失（float）。",
                          lambda: _step_body(func))


# --------------------------------------------------------------------------- config translation
def _llama_defaults() -> dict:
    import inspect
    from transformers import LlamaConfig            # in notebook 11's kernel: mindnlp's
    return {k: p.default for k, p in inspect.signature(LlamaConfig.__init__).parameters.items()
            if p.default is not inspect.Parameter.empty}


def _generic_config_keys() -> set:
    """What every transformers config accepts besides its own signature (``torch_dtype``,
    ``architectures``, token ids, ...): copied from a config.json they are legal and leave the
    network as it is; the network-defining ones among them (``tie_word_embeddings``) are compared."""
    from transformers import PretrainedConfig
    return set(PretrainedConfig().to_dict()) | {"torch_dtype", "transformers_version"}


NEUTRAL_KEYS = {"initializer_range", "use_cache", "pad_token_id", "bos_token_id", "eos_token_id"}   # no effect
# on what a network with given weights computes


def _other_changes(got: dict, effective: dict, defaults: dict, reference: dict) -> list:
    """LlamaConfig's own parameters outside the reference's keys that ``got`` sets to something
    else than their default (``head_dim=None`` means hidden / heads)."""
    changed = []
    for key in sorted(set(got) & set(defaults) - set(reference) - NEUTRAL_KEYS):
        value, default = effective[key], defaults[key]
        if key == "head_dim":
            whole = effective.get("hidden_size", 0) // max(1, effective.get("num_attention_heads") or 1)
            value, default = (whole if value is None else value), whole
        if value != default:
            changed.append(str(key))
    return changed


def _hidden_configs():
    """Two fixed configurations and one drawn from the hidden inputs."""
    from ..internlm import tiny
    rng = hidden_rng(111)
    heads = int(rng.integers(2, 7))
    drawn = tiny(hidden_size=heads * 8 * int(rng.integers(1, 5)), num_layers=int(rng.integers(1, 6)),
                 num_heads=heads, intermediate_size=32 * int(rng.integers(2, 12)),
                 vocab_size=int(rng.integers(100, 2000)), max_seq_len=int(rng.choice([64, 256, 1024])),
                 rope_base=float(rng.choice([1e4, 5e4, 1e6])), rms_norm_eps=float(rng.choice([1e-5, 1e-6])))
    return (tiny(), tiny(hidden_size=96, num_layers=3, num_heads=6, intermediate_size=256, vocab_size=500,
                         max_seq_len=128, rope_base=50000.0, rms_norm_eps=1e-5), drawn)


# transformers' ACT2FN maps both names to nn.SiLU (transformers/activations.py lines 300-301)
_SILU_NAMES = {"silu", "swish"}


def _kwargs_body(func):
    from ..families import llama_config_kwargs
    defaults = _llama_defaults()
    known = set(defaults) | _generic_config_keys()
    for config in _hidden_configs():
        got = func(config)
        observe(f"{config.name}（hidden {config.hidden_size}）的返回值是 dict", isinstance(got, dict), True)
        if not isinstance(got, dict):
            raise Mismatch(f"应返回 dict（LlamaConfig 的关键字参数），得到 {type(got).__name__}。")
        unknown = sorted(set(got) - known)
        observe(f"{config.name}（hidden {config.hidden_size}）：LlamaConfig 不认识的参数", [str(k) for k in unknown], [])
        if unknown:
            raise Mismatch(f"LlamaConfig 没有参数 {unknown}：它把不认识的参数默默收下，模型尺寸却仍用默认值。"
                           "用 LlamaConfig 自己的参数名（看它的签名：inspect.signature(LlamaConfig)）。")
        effective = {**defaults, **got}
        if effective.get("num_key_value_heads") is None:      # LlamaConfig: None means "= heads"
            effective["num_key_value_heads"] = effective.get("num_attention_heads")
        reference = llama_config_kwargs(config)
        changed = _other_changes(got, effective, defaults, reference)
        observe(f"{config.name}（hidden {config.hidden_size}）：改了默认值的其他参数", changed, [])
        if changed:
            raise Mismatch(f"{config.name}（hidden {config.hidden_size}）：你的 dict 还改了 LlamaConfig 的 {changed}"
                           "（不是默认值）。课程配置里没有对应的设置，改了它们，网络就不是同一个了。")
        for key, want in reference.items():
            value = effective[key]
            if key == "hidden_act" and isinstance(value, str) and {value, want} <= _SILU_NAMES:
                effective[key] = want                          # another name of the same function
            observe(f"{config.name}（hidden {config.hidden_size}）的 {key}", effective[key], want)
            if effective[key] != want:
                why = {"attention_bias": "InternLM-1 的 q/k/v/o 投影带偏置（Llama 默认不带；第 06 章的注意力投影）。",
                       "tie_word_embeddings": "课程模型的 lm_head 与词嵌入是两份独立的权重。"}.get(key, "")
                where = ("你没有写它，这是 LlamaConfig 的默认值" if key not in got else "你的 dict 给出的值")
                raise Mismatch(f"{config.name}（hidden {config.hidden_size}）的 {key} 与课程配置描述的网络不一致"
                               f"（{where}：{effective[key]!r}）。" + (why or "课程配置里哪一个字段说的是同一件事？"))


@exercise("code", "写 llama_kwargs：把课程 InternLM 配置翻译成 LlamaConfig 的参数",
          solution=lambda: sol.llama_kwargs,
          wrong=((lambda: sol.wrong_course_names, "LlamaConfig 没有参数"), (lambda: sol.wrong_no_bias, "attention_bias"),
                 (lambda: sol.wrong_tied, "独立的权重")),
          targets=("course_lib.families.llama_config_kwargs",),
          question="在第 2 节“练习 1（写代码）：把课程的配置翻译成 `LlamaConfig` 的参数”的脚手架里写 `my_llama_kwargs(config)`："
                   "返回一个 dict，"
                   "使 `LlamaConfig(**my_llama_kwargs(config))` 与课程的 InternLM 配置（`course_lib.internlm.tiny()` 返回的 `InternLMConfig`）"
                   "描述**同一个网络**。第一代 InternLM 与 Llama 的结构有一处不同；"
                   "Llama 的哪些默认值与课程模型不一样？检查器在三个配置上（两种固定尺寸，外加一个由检查器随机生成、事先不公开的）"
                   "与课程库里的参考实现逐项比较，不产生参数的字段也比较（例如课程配置的 `max_seq_len` 对应的 `max_position_embeddings`）：dict 里没写的参数按 `LlamaConfig` 的默认值算，"
                   "`LlamaConfig` 不认识的参数名算错（它从 `PretrainedConfig` 继承的通用参数，如 `torch_dtype`，可以写）；参考实现没有写的 `LlamaConfig` 参数，改了它的默认值也算错（如 `head_dim`、`rope_scaling`：改了就不是同一个网络）。直接调用课程库里的参考实现，笔记本里的检查和"
                   "成绩册都把这样的答案记为“借用”：请自己写。")
def llama_kwargs(func) -> bool:
    """``func(config)`` -> kwargs; compared (over LlamaConfig's defaults) with families.llama_config_kwargs."""
    return run_code_check("ch11.llama_kwargs", "应返回一个 dict：对照第 2 节练习上面列出的课程字段，逐个找 LlamaConfig 里"
                          "同一含义的参数（它的签名：inspect.signature(LlamaConfig)）；再想想 InternLM-1 与 Llama 的"
                          "结构差别（第 06 章的注意力投影）。", lambda: _kwargs_body(func))


# --------------------------------------------------------------------------- numbers
def lora_trainable(hidden: int, layers: int, r: int, targets: int) -> int:
    """LoRA on square h x h projections: A (r x h) + B (h x r) per target per layer."""
    return layers * targets * r * (hidden + hidden)


def _trainable_percent(r: int = 16, targets: int = 4) -> float:
    """What ``peft``'s ``print_trainable_parameters()`` prints as trainable% for LoRA r on
    ``targets`` hidden x hidden projections of the chapter's tiny Llama (the course's
    InternLM-tiny: the same network, section 3): 100 x trainable / (base + adapters)."""
    from ..internlm import tiny
    cfg = tiny()
    added = lora_trainable(cfg.hidden_size, cfg.num_layers, r, targets)
    return 100 * added / (cfg.num_parameters() + added)


@exercise("number", "小 Llama 的 q/k/v/o 上 r=16 的 LoRA：print_trainable_parameters 打印的 trainable% 是多少",
          solution=_trainable_percent,
          question="本章的小 Llama（第 3 节加载的 `model`，与第 2 节新建的 `fresh` 结构相同）如果不用第 4 节的 LoRA，而改用 `LoraConfig(r=16, lora_alpha=32, "
                   "target_modules=[\"q_proj\", \"k_proj\", \"v_proj\", \"o_proj\"])`，"
                   "`print_trainable_parameters()` 打印的 `trainable%` 是多少？（和它的打印格式一样保留 4 位小数）"
                   "可以手算；要用 mindnlp 验证，就对一个新建的同结构模型调用 `get_peft_model`"
                   "（`model` 已经过第 4 节的 `get_peft_model` 和第 6 节的合并，`get_peft_model` 会原地改动传给它的模型）。")
def ex1(answer) -> bool:
    """``print_trainable_parameters()``'s trainable% for LoRA r=16 on q_proj, k_proj, v_proj
    and o_proj of the notebook's tiny Llama (hidden 128, 2 layers, vocabulary 8000)."""
    return check_number(answer, _trainable_percent(), name="ch11.ex1", rel=0, abs_=1e-4,
                        hint="回到第 4 节 print_trainable_parameters() 打印的那一行：trainable params 和 all params "
                             "各是哪些参数？下面那条 cl.fact 说明了可训练参数怎样随层数、目标层数和 r 变化。")


GQA = dict(hidden=128, layers=2, heads=4, kv_heads=2)


def _bias_params(hidden: int = GQA["hidden"], layers: int = GQA["layers"], heads: int = GQA["heads"],
                 kv_heads: int = GQA["kv_heads"]) -> int:
    """attention_bias=True adds a bias to q (hidden), k and v (kv_heads x head_dim each) and o
    (hidden) in every layer."""
    head_dim = hidden // heads
    return layers * (hidden + 2 * kv_heads * head_dim + hidden)


@exercise("number", "2 个 KV 头时，attention_bias=True 给本章的小 Llama 多加了多少个参数", solution=_bias_params,
          question="把本章的小 Llama（隐藏 128、2 层、4 个注意力头）改成只有 2 个 KV 头（`num_key_value_heads=2`，"
                   "其余不变），`attention_bias=True` 时比 `False` 多多少个参数？（整数）")
def ex2(answer) -> bool:
    """The notebook's tiny Llama with 2 KV heads (hidden 128, 2 layers, 4 heads): how many
    parameters does ``attention_bias=True`` add compared with ``attention_bias=False``?"""
    return check_number(answer, _bias_params(), name="ch11.ex2", integer=True, rel=0,
                        hint="打印第 2 节建好的模型（`print(fresh)`）看它的结构：哪几个 Linear 带 bias，各自的 out_features 是多少？"
                             "num_key_value_heads 改变的是哪几个投影的宽度（第 06 章的 GQA）？")


MERGE = dict(r=16, lora_alpha=8, b=0.01, a=0.02, hidden=128)


def _merged_delta(r: int = MERGE["r"], lora_alpha: float = MERGE["lora_alpha"], b: float = MERGE["b"],
                  a: float = MERGE["a"], hidden: int = MERGE["hidden"]) -> float:
    """One element of what ``merge_and_unload()`` adds to q_proj's weight: (lora_alpha / r) * B @ A
    with every element of B (hidden x r) equal to ``b`` and of A (r x hidden) equal to ``a``."""
    B, A = np.full((hidden, r), b), np.full((r, hidden), a)
    return float(((lora_alpha / r) * (B @ A))[0, 0])


@exercise("number", "LoraConfig(r=16, lora_alpha=8)，B 全是 0.01、A 全是 0.02：合并后 q_proj 的权重每个元素加了多少",
          solution=_merged_delta,
          question="本章第 4 节的 LoRA 换成 `LoraConfig(r=16, lora_alpha=8, target_modules=[\"q_proj\", \"v_proj\"])`。"
                   "假设训练之后某一层 q_proj 的 `lora_B`（形状 (128, 16)）每个元素都是 0.01、`lora_A`（形状 (16, 128)）"
                   "每个元素都是 0.02。`merge_and_unload()` 之后，这个 q_proj 的权重的每个元素比合并前大多少？"
                   "（相对误差 1e-4 以内）")
def ex3(answer) -> bool:
    """``LoraConfig(r=16, lora_alpha=8)``; lora_B (128 x 16) all 0.01, lora_A (16 x 128) all
    0.02: by how much does every element of q_proj's weight grow in ``merge_and_unload()``?"""
    return check_number(answer, _merged_delta(), name="ch11.ex3", rel=1e-4,
                        hint="第 6 节：merge_and_unload() 往权重里加的是什么？B·A 是矩阵乘积，它的一个元素由几项相加得到？"
                             "缩放系数由 r 和 lora_alpha 怎样得到？")
