"""Checkers for notebook 09 (merge, MINDIR export, deployment).

``fold_lora`` is compared with the library's ``LoRADense`` (its ``delta_weight`` and its
output); ``export_for_serving`` is run, its MINDIR loaded with ``nn.GraphCell`` and compared
with the live network."""
from __future__ import annotations

import numpy as np

from .common import Mismatch, check_number, compare, exercise, hidden_rng, observe, run_code_check


def _solutions():
    from ..solutions import ch09
    return ch09


# ====================================================================== code exercises
@exercise("code", "写 fold_lora(W, A, B, alpha, r)：返回与 LoRA 层等价的普通 Dense 的权重",
          solution=lambda: _solutions().fold_lora,
          wrong=((lambda: _solutions().wrong_fold_no_scaling, "没有缩放"),
                 (lambda: _solutions().wrong_fold_transposed, "(out, in)"),
                 (lambda: _solutions().wrong_fold_delta_only, "忘了加上原来的 W"),
                 (lambda: _solutions().wrong_fold_inverted, "倒过来")),
          targets=("course_lib.lora.merge_lora", "course_lib.lora.LoRADense.delta_weight"),
          question="在第 2 节“写代码：把 LoRA 折叠进权重”的脚手架里写 `my_fold_lora(W, A, B, alpha, r)`："
                   "把 LoRA 旁路折叠进权重：返回新权重 $W'$，使普通 Dense 的 $W'x + b$ 等于 LoRA 层的 "
                   "$Wx + b + \\frac{\\alpha}{r}B(Ax)$"
                   "（输入是 NumPy float64 数组：W 形状 (out, in)，A 为 (r, in)，B 为 (out, r)；`alpha`、`r` 是数；"
                   "返回 (out, in) 的数组）。检查器在三种层尺寸和秩（含非方阵）上，用隐藏的随机 "
                   "W、A、B 与库里 `LoRADense` 的 `delta_weight()` 比较合并后的权重（逐元素 `np.allclose`，绝对误差 1e-6、相对误差 1e-4），"
                   "再用它算一个普通 Dense 的输出，与 LoRA 层的输出比较。")
def fold_lora(func) -> bool:
    """A plain Dense with weight ``func(W, A, B, alpha, r)`` must compute what
    ``lora.LoRADense`` computes (non-square layers, several ranks, random A and B)."""
    def body():
        from mindspore import Tensor, nn
        from ..lora import LoRADense
        rng = hidden_rng(41)
        for n_in, n_out, r, alpha in ((5, 6, 2, 4.0), (12, 7, 3, 16.0), (8, 8, 8, 8.0)):
            layer = LoRADense(nn.Dense(n_in, n_out), r, alpha)
            for p in (layer.weight, layer.bias, layer.lora_A, layer.lora_B):
                p.set_data(Tensor(rng.standard_normal(p.shape).astype(np.float32)))
            W, A, B = (p.asnumpy().astype(np.float64) for p in (layer.weight, layer.lora_A, layer.lora_B))
            got = np.asarray(func(W.copy(), A.copy(), B.copy(), alpha, r), np.float64)
            want = W + layer.delta_weight()
            what = f"Dense({n_in} -> {n_out})、r={r}、alpha={alpha:g}"
            _diagnose_fold(got, want, W, A, B, alpha, r, what)
            x = rng.standard_normal((3, n_in)).astype(np.float32)
            merged = x @ got.T + layer.bias.asnumpy()
            compare(merged, layer(Tensor(x)), f"{what}：合并后的 Dense 与 LoRA 层的输出", atol=1e-4)
    return run_code_check("ch09.fold_lora", "返回值要是 (out, in) 的 NumPy 数组。回到第 2 节的等式，核对每个矩阵的"
                          "形状：W (out, in)、A (r, in)、B (out, r)。", body)


def _diagnose_fold(got, want, W, A, B, alpha, r, what) -> None:
    observe(f"{what}：合并后的权重", got, want, atol=1e-6, rtol=1e-4)
    if got.shape != want.shape:
        raise Mismatch(f"{what}：返回的形状是 {got.shape}，应为 {want.shape}：nn.Dense 的权重按 (out, in) 存放"
                       "（它计算 x Wᵀ）；看一看你的矩阵乘积得到的是哪两个维度。")
    if np.allclose(got, want, atol=1e-6, rtol=1e-4):   # compare's tolerance: one observation
        return
    probes = {
        "你的结果等于没有缩放的 W + BA：第 2 节的等式里，更新量前面还有一个系数。": W + B @ A,
        "缩放倒过来了：你的更新量乘的是 r / alpha。": W + B @ A * (r / alpha),
        "忘了加上原来的 W：返回的只是更新量。": B @ A * (alpha / r),
        "结果是正确答案的转置：nn.Dense 的权重按 (out, in) 存放（第 2 节），不是 x @ W 的 (in, out) 布局。":
            (W.T + A.T @ B.T * (alpha / r)).T,
    }
    for bug, value in probes.items():
        if value.shape == got.shape and np.allclose(got, value, atol=1e-6):
            compare(got, want, f"{what}：合并后的权重", atol=1e-6, bug=bug)
    compare(got, want, f"{what}：合并后的权重", atol=1e-6,
            bug="对照第 2 节的等式逐项检查：原来的权重、更新量里矩阵乘的顺序、缩放系数。")


class _TinyTagger:
    """A small int32 ids -> logits network with dropout (so a training-mode export shows)."""

    @staticmethod
    def build():
        import mindspore as ms
        from mindspore import nn

        class Net(nn.Cell):
            def __init__(self):
                super().__init__()
                self.embed = nn.Embedding(50, 16)
                self.drop = nn.Dropout(p=0.5)
                self.head = nn.Dense(16, 50)

            def construct(self, ids):
                return self.head(self.drop(self.embed(ids)))

        ms.set_seed(3)
        return Net()


@exercise("code", "写 export_for_serving(net, path, batch_size, seq_len)：用 ms.export 导出 MINDIR",
          solution=lambda: _solutions().export_for_serving,
          wrong=((lambda: _solutions().wrong_export_training_mode, "dropout"),
                 (lambda: _solutions().wrong_export_swapped_shape, "形状"),
                 (lambda: _solutions().wrong_export_int64, "int64")),
          targets=("course_lib.export.export_mindir",),
          question="在第 3 节“写代码：亲手调用 `ms.export`”的脚手架里写 `my_export(net, path, batch_size, seq_len)`："
                   "把一个“int32 token id (batch, seq) → logits”的网络导出成 `<path>.mindir`（`path` 是不带扩展名的 "
                   "`pathlib.Path`），不返回值。网络交给你时处在训练模式（它有 dropout）；导出的图要给出推理模式下的输出，"
                   "并接受形状 (batch_size, seq_len) 的 int32 输入——与服务时送进来的完全一样。检查器用 "
                   "`nn.GraphCell(ms.load(...))` 加载你导出的文件，在两种形状上与推理模式下的网络比较输出（误差 1e-5 以内）。"
                   "课程库的 `export.export_mindir` 做的正是这件事：直接调用它，笔记本里的检查和"
                   "成绩册都把这样的答案记为“借用”：请自己写 `ms.export` 的调用。")
def export_for_serving(func) -> bool:
    """The learner's export, loaded back with ``nn.GraphCell(ms.load(...))``, must give the
    live network's (inference-mode) logits for int32 ids of the requested shape."""
    def body():
        import tempfile
        from pathlib import Path
        for batch, seq in ((2, 5), (3, 4)):
            with tempfile.TemporaryDirectory() as tmp:
                _check_export(func, Path(tmp) / "tagger", batch, seq)
    return run_code_check("ch09.export_for_serving", "回到第 3 节：ms.export 要哪几个参数（页首的 API 链接）；"
                          "示例输入的形状和 dtype 要与服务时送进来的一样（batch_size × seq_len 个 int32 token id）。",
                          body)


def _check_export(func, path, batch, seq) -> None:
    import mindspore as ms
    from mindspore import Tensor, nn
    net = _TinyTagger.build()
    ids = Tensor(hidden_rng(batch).integers(0, 50, (batch, seq)).astype(np.int32))
    net.set_train(False)
    want = net(ids)                                   # the checker's network, before the learner's code
    net.set_train(True)                               # as it would be right after training
    what = f"导出的 MINDIR 对 ({batch}, {seq}) int32 输入的输出"

    def fail(message: str):
        observe(what, None, want, atol=1e-5, rtol=1e-5)
        return Mismatch(message)
    try:
        func(net, path, batch, seq)
    except NotImplementedError:
        raise                                         # the untouched scaffold: "not yet"
    except Exception as err:                          # noqa: BLE001 - report with the likely cause
        raise fail(f"导出时出错：{type(err).__name__}: {str(err)[:200]}。检查 ms.export 的参数：示例输入"
                   f"（形状 ({batch}, {seq})、int32 的 Tensor）、file_name 和 file_format（第 3 节）。") from None
    files = sorted(p.name for p in path.parent.glob("*.mindir"))
    file = path.with_name(path.name + ".mindir")
    if not file.is_file():
        raise fail(f"没有找到 {file.name}（目录里有 {files}）：ms.export 会自己在 file_name 后面加上 .mindir，"
                   "所以 file_name 就是 str(path)（ms.export 要字符串，不收 pathlib.Path），不带扩展名、不换目录。")
    from ..export import mindir_inputs
    recorded = mindir_inputs(file)
    observe(f"{file.name} 记录的输入（形状、dtype）", recorded, [((batch, seq), "int32")])
    if len(recorded) == 1 and recorded[0][1] != "int32":
        raise fail(f"{file.name} 记录的输入 dtype 是 {recorded[0][1]}：服务时送进来的是 int32 的 token id，"
                   "示例输入的 dtype 决定了图记录的输入（NumPy 的整数默认是 int64）。")
    try:
        got = nn.GraphCell(ms.load(str(file)))(ids)
    except Exception:                                 # noqa: BLE001
        raise fail(f"导出的图不接受形状 ({batch}, {seq}) 的 int32 输入：dummy 输入的形状或 dtype 不对，"
                   "要和服务时送进来的完全一样（batch_size, seq_len），int32。") from None
    observe(what, got, want, atol=1e-5, rtol=1e-5)
    if tuple(got.shape) != tuple(want.shape):
        raise Mismatch(f"导出的图输出形状 {tuple(got.shape)}，应为 {tuple(want.shape)}：dummy 输入的形状不对。")
    if not np.allclose(got.asnumpy(), want.asnumpy(), atol=1e-5):
        raise Mismatch("导出的图与推理模式下的网络输出不同：网络交给你时处在训练模式，dropout 被固化进了图里"
                       "（第 3 节：导出前网络该处在什么模式？）。")


# ====================================================================== number exercises
def _serving_calls(reviews: int, batch: int) -> list:
    """[Model.predict calls, dummy rows] when ``SentimentPipeline`` scores ``reviews`` texts on a
    graph exported for ``batch`` rows: every text is one row per candidate answer (``LABELS``),
    the rows go through in chunks of ``batch`` and the last chunk is padded to ``batch``."""
    from ..data import LABELS
    rows = reviews * len(LABELS)
    calls = -(-rows // batch)
    return [calls, calls * batch - rows]


SERVING = dict(reviews=25, batch=6)


@exercise("number", "按 (6, 96) 导出的 MINDIR 给 25 条评论打分：调用几次 Model.predict、补几行假数据",
          solution=lambda: _serving_calls(**SERVING),
          question="一个 MINDIR 按形状 (6, 96) 导出（每批 6 行、每行 96 个 token）。`SentimentPipeline` 用它一次给 25 条评论"
                   "打分（把 25 条评论的列表一次传给它）：一共调用几次 `Model.predict`？其中有几行是补上的假数据？答案写成一个列表 "
                   "`[调用次数, 假数据行数]`（两个整数）。")
def ex1(answer) -> bool:
    """A MINDIR graph was exported for input shape (6, 96). When ``SentimentPipeline`` scores
    25 reviews: how many ``Model.predict`` calls, and how many dummy rows among what they compute?"""
    return check_number(answer, _serving_calls(**SERVING), name="ch09.ex1", integer=True, rel=0,
                        hint="回到第 4 节：SentimentPipeline 把一条评论变成几行？导出的图每次必须吃进几行，"
                             "最后不满的一批怎么办？")


def _adapter_bytes_r16_all_attention() -> int:
    from ..internlm import tiny
    cfg = tiny()
    return 4 * cfg.num_layers * 4 * 16 * (cfg.hidden_size + cfg.hidden_size)


@exercise("number", "InternLM-tiny 上 r=16、适配 q/k/v/o 四个投影的 float32 适配器张量共多少字节",
          solution=_adapter_bytes_r16_all_attention,
          question="如果情感适配器改成 InternLM-tiny（隐藏 128、2 层，即 `course_lib.internlm.tiny()`）的 `q_proj`、`k_proj`、`v_proj`、`o_proj` 四个投影、"
                   "r=16，它的 float32 张量一共占多少字节（不含文件头；整数）？第 1 节打印的 zoo 适配器（157,696 字节；"
                   "它是 r=8、每层全部 7 个线性层）可以用来核对你的做法。")
def ex2(answer) -> bool:
    """Bytes of the float32 adapter tensors (no file header) of LoRA r=16 on q_proj, k_proj,
    v_proj and o_proj of InternLM-tiny."""
    return check_number(answer, _adapter_bytes_r16_all_attention(), name="ch09.ex2", integer=True, rel=0,
                        hint="先用第 1 节打印的适配器（r=8、每层全部 7 个线性层：张量个数、float32 个数、字节数）"
                             "核对你的算法：每个被适配的层存哪两个张量、各是什么形状（第 2 节）？再换成 q/k/v/o 和 r=16。")
