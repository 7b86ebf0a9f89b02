"""Checkers for notebook 15 (real checkpoints).

Expected values come from the same library functions the notebook uses."""
import contextlib

from .common import Mismatch, check_number, exercise, hidden_rng, observe, recognised, run_code_check

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


VOCAB = 151936                    # the vocabulary of the exercise's InternLM-7B variant


def _plan(vocab_size: int = VOCAB):
    """Section 3's plan, for InternLM-7B with the exercise's vocabulary, in bfloat16."""
    from ..internlm import internlm_7b
    from ..memory import load_plan
    return load_plan(internlm_7b(vocab_size=vocab_size), "bfloat16", host_available=0)


def _lora_weights() -> int:
    """Section 7's LoRA ledger ``weights`` (InternLM-7B as it is): the base in bfloat16 plus
    the q/v adapters, printed before the exercise."""
    from ..finetune import lora_plan
    from ..internlm import internlm_7b
    return lora_plan(internlm_7b(), ("q_proj", "v_proj"), r=8, device_gib=64, seq_len=2048, micro_batch=2)[0].weights


def _peak_gib() -> float:
    from ..memory import GiB
    return round(_plan().host_peak / GiB, 2)


@exercise("number", "以 bfloat16 流式加载词表 151,936 的 InternLM-7B：主机内存峰值是多少 GiB（两位小数）？",
          solution=_peak_gib,
          targets=("course_lib.memory.load_plan", "course_lib.from_pretrained",   # both print the plan
                   "course_lib.pretrained.from_pretrained"),
          question="把 InternLM-7B 的词表换成 151,936 个词（`internlm_7b(vocab_size=151936)`，其余不变，"
                   "不需要真的下载），以 bfloat16 流式加载，主机内存峰值是多少 GiB（1 GiB = 2**30 字节）？"
                   "保留两位小数（检查器接受 ±0.006）。"
                   "用第 3 节的公式算（参数量可以用配置的 `num_parameters()` 取，最大的张量从配置的尺寸推出）；不要调用 `memory.load_plan` 或 `cl.from_pretrained`（它在读权重之前打印同一份计划），成绩册把用它们得到的答案记为“借用”。")
def peak_gib(answer) -> bool:
    from ..memory import GiB
    from ..internlm import internlm_7b
    plan, original = _plan(), _plan(vocab_size=internlm_7b().vocab_size)
    unchanged = ("这是原来的 InternLM-7B（词表 103,168）的峰值：题目换了词表，"
                 "全部权重和“正在搬运的那一个张量”都跟着变。")
    hint = recognised(answer, [("这个数只是全部权重（bfloat16）：第 3 节的峰值里还有“正在搬运的那一个张量”，"
                                "它在这个模型里是哪一个、有多大？", plan.weights / GiB),
                               (unchanged, original.host_peak / GiB),
                               (unchanged, round(_lora_weights() / GiB, 2) +          # section 7's printed
                                round(original.largest_tensor / GiB, 2)),              # 13.65, + 0.79
                               ("全部权重算对了；“正在搬运的那一个张量”是换了词表之后最大的那个，它也变了。",
                                (plan.weights + original.largest_tensor) / GiB)],
                      "回到第 3 节的峰值公式：全部权重按目标精度一共多少字节？“正在搬运的那一个张量”"
                      "在这个模型里是哪一个、有多大？", abs_=0.006)
    return check_number(answer, _peak_gib(), name="ch15.peak_gib", abs_=0.006, hint=hint)


def _tokenizer():
    """The look-alike InternLM tokenizer, trained once into the cache. The grader runs the
    reference and learners' processes side by side: each trains into its own temporary
    folder and renames it into place, so no process ever reads a half-written one (a
    leftover without ``tokenizer.model`` is replaced)."""
    import os
    import shutil
    import tempfile
    from pathlib import Path
    from ..hf_tokenizer import load_hf_tokenizer
    from ..lookalike import _tokenizer_files, train_tokenizer
    from ..runtime import cache_dir
    d = cache_dir("check") / "ch15-internlm-tokenizer"
    if not (d / "tokenizer.model").exists():
        tmp = Path(tempfile.mkdtemp(prefix=".ch15-tokenizer-", dir=d.parent))
        train_tokenizer(tmp, "internlm")
        _tokenizer_files(tmp, "internlm")
        if d.exists() and not (d / "tokenizer.model").exists():
            shutil.rmtree(d, ignore_errors=True)
        try:
            os.replace(tmp, d)
        except OSError:                      # another process put a whole one there first
            shutil.rmtree(tmp, ignore_errors=True)
    return load_hf_tokenizer(d)


_REAL: dict = {}           # the library's functions while _no_borrowing() has replaced them


def _reference():
    from .. import conversation
    return _REAL.get("internlm_prompt", conversation.internlm_prompt)


@contextlib.contextmanager
def _no_borrowing():
    """While the learner's function runs, the library's ready-made prompt builders raise: the
    page's demo ``conversation.chat_format(imodel, ...)`` would otherwise return the answer."""
    from .. import conversation
    names = ("internlm_prompt", "chat_format")

    def refuse(name):
        def stub(*args, **kwargs):
            raise Mismatch(f"你的函数调用了课程库里现成的 conversation.{name}：题目要你按第 5 节的模板自己写，"
                           "不借用它。")
        return stub
    _REAL.update({n: getattr(conversation, n) for n in names})
    try:
        for n in names:
            setattr(conversation, n, refuse(n))
        yield
    finally:
        for n in names:
            setattr(conversation, n, _REAL.pop(n))


def _no_bos(tokenizer, messages):
    return _reference()(tokenizer, messages)[1:]


def _no_newline(tokenizer, messages):
    text = "".join(f"<|User|>:{m['content']}<eoh><|Bot|>:" if m["role"] == "user"
                   else f"{m['content']}<eoa>\n" for m in messages)
    return tokenizer.encode(text)


def _prompt_bug(tok, got, want) -> str:
    """What differs between the learner's ids and the real prompt (never the template)."""
    bos = want[0]
    name = "<s>" if bos == tok.token_to_id("<s>") else repr(tok.decode([bos], False))
    if got == want[1:]:
        return (f"你的 id 序列比应有的少了最前面的 {name}（id {bos}）："
                "第 5 节说这两个仓库的 tokenizer.encode 会做什么？")
    if got.count(bos) > want.count(bos):
        return (f"你的序列里 {name}（id {bos}）出现了 {got.count(bos)} 次，应有 {want.count(bos)} 次："
                "是不是分段编码再拼起来了？第 5 节说模板拼好之后怎样编码。")
    try:
        text, want_text = tok.decode(got, False), tok.decode(want, False)
    except Exception:                                   # noqa: BLE001 - ids the tokenizer lacks
        return ""
    if text.replace("\n", "") == want_text.replace("\n", ""):
        return "解码之后，你的文本与应有的只差换行符：对照第 5 节的模板，看每一段结尾有没有换行。"
    return "对照第 5 节 InternLM-chat 的模板，核对这个位置前后的文本。"


@exercise("code", "写 internlm_prompt(tokenizer, messages)：InternLM-chat 的真实提示词 token id",
          solution=_reference, wrong=((lambda: _no_bos, "少了最前面的"), (lambda: _no_newline, "换行符")),
          targets=("course_lib.conversation.internlm_prompt",
                   "course_lib.conversation.chat_format"),      # chat_format(InternLM model, ...) calls it
          question="不看 `course_lib/conversation.py`，按第 5 节写出的 InternLM-chat 模板（检查器按这个模板评分；"
                   "上游 `build_inputs` 各版本的差别见第 5 节），在下面的脚手架里写提示词的编码函数 `internlm_prompt(tokenizer, messages)`："
                   "`tokenizer` 是 `cl.load_hf_tokenizer` 读出的分词器，`messages` 是 "
                   "`[{\"role\": \"user\" 或 \"assistant\", \"content\": 文本}, ...]`，user 与 assistant 交替、"
                   "最后一条是 user；内容原样放进模板（其中的换行也照原样保留）。返回送进模型的完整 token id 列表（第 5 节打印的 "
                   "InternLM prompt ids 就是这样一个列表）。检查器在隐藏的单轮、多轮对话上"
                   "与第 5 节模板给出的 id 逐个比对，并指出第一个不同的位置。", cell="answers")
def internlm_prompt(fn) -> bool:
    hint = "对照第 5 节 InternLM-chat 的模板和编码方式核对你的函数；返回值是 token id 的列表。"

    def body():
        tok, ref = _tokenizer(), _reference()
        for n, messages in enumerate(_hidden_chats(), 1):
            want = ref(tok, messages)
            with _no_borrowing():
                got = list(fn(tok, messages))
            observe(f"第 {n} 段隐藏对话的 token id", got, list(want))
            if got != want:
                first = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
                mine = tok.decode(got[first:first + 4], False) if got[first:first + 4] else ""
                raise Mismatch(f"第 {n} 段隐藏对话（{len(messages)} 条消息）从第 {first} 个 id 起与模板不同："
                               f"你的是 {got[first:first + 4]}（{mine!r}；你的序列共 {len(got)} 个 id，"
                               f"应有 {len(want)} 个）。" + _prompt_bug(tok, got, want))
    return run_code_check("ch15.internlm_prompt", hint, body)
