"""Checkers for notebook 00 (environment and course tour)."""
from .common import check_number, exercise, verdict


def _count(text: str) -> int:
    from ..tokenizer import load_tokenizer
    return len(load_tokenizer().encode(text))


@exercise("number", "课程分词器把 '人工智能' 编码成几个 id", solution=lambda: _count("人工智能"))
def ex1(answer) -> bool:
    """How many token ids does the course tokenizer produce for '人工智能'?"""
    return check_number(answer, _count("人工智能"), integer=True, name="ch00.ex1",
                        hint="用 tok.encode('人工智能') 数一数 id 的个数。")


@exercise("number", "新闻语料里没有的 '🚀' 被字节级 BPE 编码成几个 id（先推理再验证）",
          solution=lambda: _count("🚀"))
def ex2(answer) -> bool:
    """The news corpus never contains '🚀': how many ids does the byte-level BPE give it?"""
    return check_number(answer, _count("🚀"), integer=True, name="ch00.ex2",
                        hint="没见过的字符退回字节：'🚀'.encode('utf-8') 有几个字节？")


@exercise("number", "把 tok.encode('我爱北京天安门') 解码回文本", solution=lambda: "我爱北京天安门")
def ex3(answer) -> bool:
    """Decode the ids of '我爱北京天安门' back to text."""
    return verdict(isinstance(answer, str) and answer == "我爱北京天安门",
                   "tok.decode(tok.encode(text)) 应当原样还原。", "ch00.ex3")
