"""Checkers for notebook 15 (real checkpoints).

Expected values come from the same library functions the notebook uses."""
from .common import Mismatch, check_number, exercise, hidden_rng, observe, run_code_check

HIDDEN_CHATS = (
    [{"role": "user", "content": "北京今天天气怎么样？"}],
    [{"role": "user", "content": "你好"}, {"role": "assistant", "content": "你好！"},
     {"role": "user", "content": "讲个笑话\n要短"}],
)


PHRASES = ("今天", "天气", "怎么样", "你好", "讲个笑话", "要短", "谢谢", "北京", "明天", "会下雨吗", "好的")


def _hidden_chats() -> tuple:
    """The fixed chats and a multi-turn one drawn from the hidden inputs."""
    rng = hidden_rng(150)
    turns = 2 * int(rng.integers(1, 3)) + 1
    drawn = [{"role": ("user", "assistant")[i % 2],
              "content": "".join(rng.choice(PHRASES, int(rng.integers(1, 4))))} for i in range(turns)]
    return HIDDEN_CHATS + (drawn,)


def _peak_gib() -> float:
    from ..internlm import internlm_7b
    from ..memory import GiB, load_plan
    return round(load_plan(internlm_7b(), "bfloat16", host_available=0).host_peak / GiB, 2)


@exercise("number", "以 bfloat16 流式装载 InternLM-7B：主机内存峰值是多少 GiB（两位小数）？",
          solution=_peak_gib,
          question="以 bfloat16 流式加载 InternLM-7B（`internlm_7b()`，不需要真的下载），"
                   "主机内存峰值是多少 GiB（保留两位小数）？先用本章的公式手算。")
def peak_gib(answer) -> bool:
    return check_number(answer, _peak_gib(), name="ch15.peak_gib", abs_=0.006,
                        hint="峰值 = 全部权重（每个参数 2 字节）+ 最大的那一个张量"
                             "（InternLM-7B 是 103168 x 4096 的词嵌入 / lm_head）。")


def _tokenizer():
    from ..hf_tokenizer import load_hf_tokenizer
    from ..lookalike import _tokenizer_files, train_tokenizer
    from ..runtime import cache_dir
    d = cache_dir("check", "ch15-internlm-tokenizer")
    if not (d / "tokenizer.model").exists():
        train_tokenizer(d, "internlm")
        _tokenizer_files(d, "internlm")
    return load_hf_tokenizer(d)


def _reference():
    from ..conversation import internlm_prompt
    return internlm_prompt


def _no_bos(tokenizer, messages):
    return _reference()(tokenizer, messages)[1:]


def _no_newline(tokenizer, messages):
    text = "".join(f"<|User|>:{m['content']}<eoh><|Bot|>:" if m["role"] == "user"
                   else f"{m['content']}<eoa>\n" for m in messages)
    return tokenizer.encode(text)


@exercise("code", "写 internlm_prompt(tokenizer, messages)：InternLM-chat 的真实提示词 token id",
          solution=_reference, wrong=((lambda: _no_bos, "<s>"), (lambda: _no_newline, "<eoh>\\n")),
          targets=("course_lib.conversation.internlm_prompt",),
          question="不看 `course_lib/conversation.py`，"
                   "在下面的脚手架里写出 InternLM-chat 的提示词编码函数 `internlm_prompt(tokenizer, messages)`（检查器会在隐藏的多轮对话上和真实格式逐个 id 比对，"
                   "并指出第一个不同的位置）。", cell="answers")
def internlm_prompt(fn) -> bool:
    hint = ("模板是 <|User|>:问<eoh>\\n<|Bot|>:答<eoa>\\n …… 最后以 <|User|>:问<eoh>\\n<|Bot|>: 结尾，"
            "再用 tokenizer.encode 整体编码（会在最前面加 <s>）。")

    def body():
        tok, ref = _tokenizer(), _reference()
        for n, messages in enumerate(_hidden_chats(), 1):
            got, want = list(fn(tok, messages)), ref(tok, messages)
            observe(f"第 {n} 段隐藏对话的 token id", got, list(want))
            if got != want:
                first = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
                raise Mismatch(f"第 {first} 个 id 起不同：你的 {got[first:first + 4]}，应为 "
                               f"{want[first:first + 4]}（{tok.decode(want[first:first + 4], False)!r}）。{hint}")
    return run_code_check("ch15.internlm_prompt", hint, body)
