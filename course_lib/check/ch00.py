"""Checkers for notebook 00 (environment and course tour)."""
from .common import check_number, exercise, observe, verdict


def _count(text: str) -> int:
    from ..tokenizer import load_tokenizer
    return len(load_tokenizer().encode(text))


@exercise("number", "课程分词器把 '人工智能' 编码成几个 id", solution=lambda: _count("人工智能"),
          question='课程分词器把 `"人工智能"` 编码成几个 id？')
def ex1(answer) -> bool:
    """How many token ids does the course tokenizer produce for '人工智能'?"""
    return check_number(answer, _count("人工智能"), integer=True, name="ch00.ex1",
                        hint="用 tok.encode('人工智能') 数一数 id 的个数。")


@exercise("number", "新闻语料里没有的 '🚀' 被字节级 BPE 编码成几个 id（先推理再验证）",
          solution=lambda: _count("🚀"),
          question='新闻语料里从来没有 `"🚀"`。字节级 BPE 会把它编码成几个 id？'
                   '先想它在 UTF-8 里占几个字节（`"🚀".encode("utf-8")`），再用 `tok.encode` 验证。')
def ex2(answer) -> bool:
    """The news corpus never contains '🚀': how many ids does the byte-level BPE give it?"""
    return check_number(answer, _count("🚀"), integer=True, name="ch00.ex2",
                        hint="没见过的字符退回字节：'🚀'.encode('utf-8') 有几个字节？")


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
    return verdict(isinstance(answer, str) and answer == want,
                   "把整个 id 列表一次交给 tok.decode，结果（一个字符串）就是答案；前两个 id 是同一个字的"
                   "两段字节，单独解码时各显示成“�”，合在一起才是完整的字。", "ch00.ex3")
