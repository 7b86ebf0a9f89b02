"""Checkers for notebook 00 (environment and course tour)."""
from .common import verdict


def ex1(answer) -> bool:
    """How many token ids does the course tokenizer produce for '人工智能'?"""
    from ..tokenizer import load_tokenizer
    expected = len(load_tokenizer().encode("人工智能"))
    return verdict(answer == expected, "用 tok.encode('人工智能') 数一数 id 的个数。", "ch00.ex1")


def ex2(answer) -> bool:
    """Which environment variable switches every notebook to the quick CI scale? (name=value)"""
    ok = isinstance(answer, str) and answer.replace(" ", "") == "COURSE_SCALE=ci"
    return verdict(ok, "看 course_lib/scale.py 顶部的说明：变量名=取值。", "ch00.ex2")


def ex3(answer) -> bool:
    """Decode the ids of '我爱北京天安门' back to text."""
    return verdict(answer == "我爱北京天安门", "tok.decode(tok.encode(text)) 应当原样还原。", "ch00.ex3")
