"""Checkers for notebook 00 (environment and course tour)."""
import functools

from .common import check_number, exercise, recognised


def _count(text: str) -> int:
    from ..tokenizer import load_tokenizer
    return len(load_tokenizer().encode(text))


WORD = "深度学习"


@exercise("number", f"课程分词器把 '{WORD}' 编码成几个 id", solution=lambda: _count(WORD),
          question=f'课程分词器把 `"{WORD}"` 编码成几个 id？答一个整数，要完全相等（数的是 id，不是字数）。')
def ex1(answer) -> bool:
    """How many token ids does the course tokenizer produce for WORD?"""
    hint = recognised(answer, [("分词器没有把这四个字合成一个 id：用第 4 节的 `tok.encode` 看它怎样切分这四个字。", 1),
                               ("这是字数：分词器的 id 不一定一字一个，常见的词可能合成一个 id（第 4 节）。", len(WORD))],
                     "回到第 4 节的分词器：数的是它为这段文字给出的 id，不是你估计的词数。")
    return check_number(answer, _count(WORD), integer=True, name="ch00.ex1", hint=hint)


@exercise("number", "新闻语料里没有的 '🚀' 被字节级 BPE 编码成几个 id（先推理再验证）",
          solution=lambda: _count("🚀"),
          question='新闻语料里从来没有 `"🚀"`。字节级 BPE 会把它编码成几个 id？'
                   "先按第 4 节的说明推理（没见过的字符用什么表示），再用 `tok.encode` 验证。答一个整数，要完全相等。")
def ex2(answer) -> bool:
    """The news corpus never contains '🚀': how many ids does the byte-level BPE give it?"""
    hint = recognised(answer, [("没有一个 id 代表整个“🚀”：BPE 只为语料里出现过的片段学到 token（第 4 节）。", 1)],
                     "回到第 4 节第二个例子和它下面的解释：没见过的字符用什么表示？"
                     "这个字符在 UTF-8 里是什么样子？")
    return check_number(answer, _count("🚀"), integer=True, name="ch00.ex2", hint=hint)


@functools.cache
def _de_counts() -> tuple[int, int]:
    """(tokens that decode to exactly '的', characters '的') in the news validation split.
    A vocabulary holds each string once, so those tokens are the one id ``encode("的")`` gives."""
    from .. import data
    from ..tokenizer import load_tokenizer
    tok = load_tokenizer()
    val = data.news_splits().validation
    (de,) = tok.encode("的")
    n_tokens = sum(ids.count(de) for ids in tok.encode_batch(val))
    return n_tokens, sum(doc.count("的") for doc in val)


@exercise("number", "新闻验证集编码后，单独成为一个 token 的“的”有多少个",
          solution=lambda: _de_counts()[0],
          question="把新闻验证集（`data.news_splits().validation`）编码之后，"
                   "**单独**成为一个 token 的“的”（就是 `tok.encode(\"的\")` 给出的那一个 id）出现了多少次？"
                   "答一个整数，要完全相等。（检查器只检查这个次数；再和“的”这个字出现的次数比一比，"
                   "想一想其余的“的”到哪里去了——这一问不评分。）")
def ex3(answer) -> bool:
    """How many tokens of the encoded news validation split are exactly '的'?"""
    n_tokens, n_chars = _de_counts()
    hint = recognised(answer, [("这是“的”这个字在文本里出现的次数：题目数的是编码以后的 token。", n_chars)],
                      "数的是整个验证集编码后的 id 序列里、解码后正好是“的”的那些 token；"
                      "BPE 常把“的”和前后的字合成一个更长的 token（第 4 节），那些不算。")
    return check_number(answer, n_tokens, integer=True, name="ch00.ex3", hint=hint)
