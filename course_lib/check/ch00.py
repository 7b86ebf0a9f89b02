"""Checkers for notebook 00 (environment and course tour)."""
from .common import check_number, exercise, observe, recognised, verdict


def _count(text: str) -> int:
    from ..tokenizer import load_tokenizer
    return len(load_tokenizer().encode(text))


@exercise("number", "课程分词器把 '人工智能' 编码成几个 id", solution=lambda: _count("人工智能"),
          question='课程分词器把 `"人工智能"` 编码成几个 id？')
def ex1(answer) -> bool:
    """How many token ids does the course tokenizer produce for '人工智能'?"""
    hint = recognised(answer, [("分词器没有把这四个字合成一个 id：第 4 节打印了它怎样切分文本。", 1)],
                     "回到第 4 节的分词器：数的是它为这段文字给出的 id，不是你估计的词数。")
    return check_number(answer, _count("人工智能"), integer=True, name="ch00.ex1", hint=hint)


@exercise("number", "新闻语料里没有的 '🚀' 被字节级 BPE 编码成几个 id（先推理再验证）",
          solution=lambda: _count("🚀"),
          question='新闻语料里从来没有 `"🚀"`。字节级 BPE 会把它编码成几个 id？'
                   "先按第 4 节的说明推理（没见过的字符用什么表示），再用 `tok.encode` 验证。")
def ex2(answer) -> bool:
    """The news corpus never contains '🚀': how many ids does the byte-level BPE give it?"""
    hint = recognised(answer, [("没有一个 id 代表整个“🚀”：BPE 只为语料里出现过的片段学到 token（第 4 节）。", 1)],
                     "回到第 4 节第二个例子和它下面的解释：没见过的字符用什么表示？"
                     "这个字符在 UTF-8 里是什么样子？")
    return check_number(answer, _count("🚀"), integer=True, name="ch00.ex2", hint=hint)


# Ids the notebook never prints: a character the news corpus lacks, as two byte tokens, then
# common characters and words (the question quotes them; the answer is their decoding).
EX3_IDS = (290, 236, 838, 1476, 1916, 679)


def _decoded() -> str:
    from ..tokenizer import load_tokenizer
    return load_tokenizer().decode(list(EX3_IDS))


@exercise("number", f"tok.decode({list(EX3_IDS)}) 解码成什么文本", solution=_decoded,
          question=f"字节级 BPE 会把生僻字拆成字节：`tok.decode({list(EX3_IDS)})` 解码成什么文本？"
                   f"先用 `[tok.decode([i]) for i in {list(EX3_IDS)}]` 逐个解码看看（哪几个 id 单独解码时显示成“�”？），"
                   "再把整个列表一次解码，把**解码的结果**（一个字符串）交上来。")
def ex3(answer) -> bool:
    """Decode ids the notebook never prints (a rare character split into bytes, then words)."""
    want = _decoded()
    observe("答案", answer, want)
    if not isinstance(answer, str):
        hint = f"答案是 {type(answer).__name__}：题目要的是解码得到的文本（一个字符串）。"
    elif "\ufffd" in answer:
        hint = ("你的文本里有“�”：半个字符的字节单独解码就会变成它（第 4 节第二个例子下面的解释）。"
                "题目要的是整个列表一次解码的结果。")
    elif len(answer) < len(want):
        hint = "比正确的文本少了字：列表里的每个 id 都要参与解码，包括单独解码时显示成“�”的那几个。"
    else:
        hint = "和整个列表一次解码的结果不同：逐字核对，别手动改动解码出来的文本。"
    return verdict(isinstance(answer, str) and answer == want, hint, "ch00.ex3")
