"""Checkers for notebook 03 (mindspore.dataset pipelines)."""
import functools

from .common import (check_number, exercise, hidden_rng, Mismatch, observe, recognised,
                     run_code_check)


def _sol(name):
    def factory():
        from ..solutions import ch03
        return getattr(ch03, name)
    factory.__name__ = name
    return factory


# --------------------------------------------------------------------------- numbers
@functools.lru_cache(maxsize=None)
def _ex1(drop_remainder: bool = True, repeat: int = 2) -> int:
    import mindspore.dataset as ds
    data = ds.NumpySlicesDataset(list(range(103)), column_names=["x"], shuffle=False)
    return data.batch(8, drop_remainder=drop_remainder).repeat(repeat).get_dataset_size()


@exercise("number", "103 个样本 batch(8, drop_remainder=True).repeat(2) 的批数", solution=_ex1,
          question='`ds.NumpySlicesDataset(list(range(103)), column_names=["x"]).batch(8, drop_remainder=True).repeat(2)` 有多少个批？'
                   "先心算。")
def ex1(answer) -> bool:
    """ds.NumpySlicesDataset(list(range(103)), column_names=["x"]).batch(8,
    drop_remainder=True).repeat(2): how many batches?"""
    hint = recognised(answer, [
        ("这是保留最后那个不满的批时的批数：题目里 drop_remainder=True（第 5 节）。", _ex1(drop_remainder=False)),
        ("这是一遍的批数：batch 之后还有 repeat(2)（第 5 节）。", _ex1(repeat=1)),
        ("这是一遍、且保留最后那个不满的批时的批数：再看看 "
                                               "drop_remainder=True 和 repeat(2) 各做了什么（第 5 节）。", _ex1(drop_remainder=False, repeat=1)),
    ], "回到第 5 节的那几行：drop_remainder=True 对最后一个不满的批做了什么，"
       "batch 之后的 repeat(2) 又做了什么？")
    return check_number(answer, _ex1(), integer=True, name="ch03.ex1", hint=hint)


@functools.lru_cache(maxsize=None)
def _ex2(eos: int = 1, row: int = 65, shuffled: bool = False) -> int:
    from ..data import news_documents, news_splits
    from ..tokenizer import load_tokenizer
    documents = news_splits().train if shuffled else news_documents()
    ids = load_tokenizer().encode_batch(documents[:100])
    return sum(len(x) + eos for x in ids) // row      # every row holds block_size + 1 tokens


@exercise("number", "前 100 篇新闻加 <eos> 后 pack_blocks(block_size=64) 的行数", solution=_ex2,
          question="新闻语料的前 100 篇文档（`data.news_documents()[:100]`）分词，"
                   "用 `pipelines.pack_blocks(..., block_size=64, eos_id=tok.eos_id)` 打包（每篇后由它加 `<eos>`，不要再手动加），得到多少行？")
def ex2(answer) -> bool:
    """The first 100 news documents (course_lib.data.news_documents()[:100]) tokenised,
    each followed by <eos>, packed with pack_blocks(..., block_size=64): how many rows?"""
    cases = [(_ex2(eos=0), "少了每篇文档后面的 <eos>：它们也是打包流里的 token（第 7 节）。"),
             (_ex2(row=64), "每行的 token 数不是 block_size：回到第 7 节看打包后每行的长度。"),
             (_ex2(eos=2), "<eos> 加了两遍：pack_blocks 自己会在每篇后面加一个（题目）。"),
             (_ex2(shuffled=True), "这是训练集前 100 篇的行数（本章的 `docs` 来自 `news_splits().train`，"
                                   "切分时打乱了顺序）：题目要的是语料原来的前 100 篇，`data.news_documents()[:100]`。")]
    hint = recognised(answer, [(t, v) for v, t in cases if v != _ex2()],
                     "回到第 7 节的打包：打包前的 token 流有多长（别漏了每篇后面的 <eos>），"
                     "每行有几个 token，不满一行的尾巴怎么处理？")
    return check_number(answer, _ex2(), integer=True, name="ch03.ex2", hint=hint)


@functools.lru_cache(maxsize=None)
def _ex3(split: str = "validation", q: int = 95) -> int:
    import numpy as np
    from ..data import review_splits
    from ..tokenizer import load_tokenizer
    texts = [t for t, _ in getattr(review_splits(), split)]
    lengths = [len(x) for x in load_tokenizer().encode_batch(texts)]
    return int(np.percentile(lengths, q, method="inverted_cdf"))


@exercise("number", "验证集评论 token 长度的第 95 百分位数（最近秩）", solution=_ex3,
          question="验证集评论（`data.review_splits().validation`）token 长度的第 95 百分位数是多少？"
                   "用**最近秩**定义：把 N 个长度从小到大排好，取第 ⌈0.95·N⌉ 个（从 1 数起），"
                   "也是本章 `sources.length_stats` 的定义；"
                   "长度按 `tok.encode` 的 id 个数算（不加 `<bos>`/`<eos>`）。"
                   "答案是一个整数。不要调用 `sources.length_stats`：成绩册把用它得到的答案记为“借用”。",
          targets=("course_lib.sources.length_stats",))
def ex3(answer) -> bool:
    """The 95th percentile (nearest rank: numpy's method="inverted_cdf") of the token
    lengths of the *validation* reviews?"""
    cases = [(_ex3("train"), "这是训练集的第 95 百分位数：题目问的是验证集。"),
             (_ex3(q=90), "这是第 90 百分位数：题目问的是第 95 百分位数。")]
    hint = recognised(answer, [(t, v) for v, t in cases if v != _ex3()],
                     "用的是哪个集合、哪种百分位定义（最近秩，见题目）？长度按 id 个数算；"
                     "第 7 节统计新闻文档长度时用的就是这个定义。")
    return check_number(answer, _ex3(), integer=True, name="ch03.ex3", hint=hint)


# --------------------------------------------------------------------------- code
def _run_map(fn, rows, out_cols, ragged=False):
    """Run ``fn`` on every row through ``dataset.map`` (as the learner will) -> list of tuples."""
    import mindspore.dataset as ds
    import numpy as np
    if ragged:
        data = ds.GeneratorDataset([(np.asarray(r, np.int32),) for r in rows], ["ids"], shuffle=False)
    else:
        data = ds.NumpySlicesDataset({"ids": np.asarray(rows, np.int32)}, shuffle=False)
    data = data.map(fn, input_columns="ids", output_columns=out_cols)
    return [tuple(np.asarray(c) for c in r) for r in data.create_tuple_iterator(output_numpy=True)]


SHIFT_HINT = ("每个位置的标签是它的下一个 token（第 7 节）：一行 block_size + 1 个 token 里，"
              "输入取哪一段、标签取哪一段？")


@exercise("code", "写 dataset.map 用的变换：打包行 → (input_ids, labels)，标签右移一位",
          solution=_sol("shift_for_lm"),
          wrong=((_sol("wrong_shift_none"), "没有错开"), (_sol("wrong_shift_reversed"), "反了"),
                 (_sol("wrong_shift_full_input"), "多一个 token")),
          targets=("course_lib.pipelines.BlockSource",),
          question="**语言模型的输入与标签。** 写 `shift_for_lm(row)`："
                   "`row` 是打包后的一行（`BLOCK + 1` 个 token），返回 `(input_ids, labels)`，"
                   "两者都是 int32、长度比 `row` 少 1（本章返回的两者长 `BLOCK`；检查器也用别的行长测试），标签是下一个 token。用法（`blocks_` 是第 7 节打包出的行）："
                   '`ds.NumpySlicesDataset({"row": blocks_}).map(shift_for_lm, input_columns="row", output_columns=["input_ids", "labels"])`。'
                   "不要调用第 7 节的 `pipelines.BlockSource`：它做的正是这件事，成绩册把这样得到的答案记为“借用”。")
def shift_for_lm(fn) -> bool:
    """``fn(row) -> (input_ids, labels)`` for rows of block_size + 1 tokens."""
    def body():
        import numpy as np
        rng = hidden_rng(0)
        fn(np.arange(5, dtype=np.int32))                      # NotImplementedError surfaces here
        for block in (1, 4, 7):
            rows = rng.integers(3, 900, size=(3, block + 1)).astype(np.int32)
            for k, (row, (inp, lab)) in enumerate(zip(rows, _run_map(fn, rows, ["input_ids", "labels"]))):
                want_in, want_lab = row[:-1], row[1:]
                where = f"block_size={block} 的第 {k} 行 {row.tolist()}"
                observe(f"{where} 的 input_ids", inp, want_in)
                observe(f"{where} 的 labels", lab, want_lab)
                observe(f"{where} 的 dtype", [str(inp.dtype), str(lab.dtype)], ["int32", "int32"])
                if inp.shape != want_in.shape or lab.shape != want_lab.shape:
                    raise Mismatch(f"{where}：得到 input_ids {inp.shape}、labels {lab.shape}，"
                                   f"两者都应是 ({block},)：一行比 block_size 多一个 token，"
                                   "输入和标签各用不到其中一个（第 7 节）。")
                if np.array_equal(lab, inp):
                    raise Mismatch(f"{where}：labels 与 input_ids 完全相同，没有错开一位：模型只学会抄写输入。")
                if np.array_equal(inp, want_lab) and np.array_equal(lab, want_in):
                    raise Mismatch(f"{where}：input_ids 和 labels 反了：模型在用后一个 token 预测前一个。")
                if not (np.array_equal(inp, want_in) and np.array_equal(lab, want_lab)):
                    raise Mismatch(f"{where}：得到 input_ids={inp.tolist()}、labels={lab.tolist()}。{SHIFT_HINT}")
                if inp.dtype != np.int32 or lab.dtype != np.int32:
                    raise Mismatch(f"{where}：dtype 是 {inp.dtype}/{lab.dtype}，应为 int32（嵌入层要整数 id）。")
    return run_code_check("ch03.shift_for_lm", SHIFT_HINT, body)


PAD_HINT = ("对照题目逐项核对：截断时保留哪一端、填充补在哪一侧、用哪个 pad_id、"
            "掩码里 True 表示什么（第 3 节、第 01 章的掩码约定）。")


@exercise("code", "写 dataset.map 用的变换：截断（保留开头）+ 右侧填充 + key_padding_mask",
          solution=_sol("truncate_pad"),
          wrong=((_sol("wrong_pad_keeps_end"), "结尾"), (_sol("wrong_pad_mask_inverted"), "反了"),
                 (_sol("wrong_pad_left"), "左侧"), (_sol("wrong_pad_mask_from_values"), "恰好等于 pad_id")),
          targets=("course_lib.classifier.encode_reviews",),
          question="**截断、填充与掩码。** 写 `truncate_pad(ids, max_len=16, pad_id=0)`："
                   "保留**开头**的 `max_len` 个 id，右侧补 `pad_id` 到 `max_len`，"
                   "返回 `(input_ids, key_padding_mask)`：`input_ids` 为 int32、形状 `(max_len,)`；"
                   "`key_padding_mask` 为 bool、形状 `(max_len,)`，填充位置为 `True`（"
                   "与[第 01 章](01_cell.ipynb)的约定一致；掩码标的是补上去的位置：真实序列里的 id 也可能等于 `pad_id`）。它一步做完第 3 节 `Truncate` + `PadEnd` 的事，"
                   "还多给出掩码。不要调用第 02 章的 `classifier.encode_reviews`（它也做截断和填充）：成绩册把这样得到的答案记为“借用”。")
def truncate_pad(fn) -> bool:
    """``fn(ids, max_len=16, pad_id=0) -> (input_ids int32 (max_len,), mask bool (max_len,))``."""
    def body():
        import numpy as np
        rng = hidden_rng(1)
        fn(np.arange(3, dtype=np.int32), max_len=5, pad_id=0)   # NotImplementedError surfaces here
        for max_len, pad_id in ((6, 0), (9, 2)):
            rows = [rng.integers(3, 900, size=n).astype(np.int32) for n in (1, max_len - 2, max_len, max_len + 5)]
            rows.append(np.array([7, pad_id, 11], np.int32))      # a real token whose id equals pad_id
            out = _run_map(lambda ids: fn(ids, max_len=max_len, pad_id=pad_id), rows,
                           ["input_ids", "mask"], ragged=True)
            for ids, (got_ids, got_mask) in zip(rows, out):
                kept = ids[:max_len]                          # the expected values, by hand
                want_ids = np.concatenate([kept, np.full(max_len - len(kept), pad_id)]).astype(np.int32)
                want_mask = np.arange(max_len) >= len(kept)
                where = f"max_len={max_len}、pad_id={pad_id}、长度 {len(ids)} 的序列"
                observe(f"{where} 的 input_ids", got_ids, want_ids)
                observe(f"{where} 的掩码", got_mask, want_mask)
                observe(f"{where} 的 dtype", [str(got_ids.dtype), str(got_mask.dtype)], ["int32", "bool"])
                if got_ids.shape != (max_len,) or got_mask.shape != (max_len,):
                    raise Mismatch(f"{where}：输出形状 {got_ids.shape}/{got_mask.shape}，应都为 ({max_len},)。")
                if not np.array_equal(got_ids, want_ids):
                    if len(ids) > max_len and np.array_equal(got_ids, ids[-max_len:]):
                        bug = "截断时保留了结尾：题目要保留开头。"
                    elif np.array_equal(got_ids[max_len - min(len(ids), max_len):], ids[:max_len]):
                        bug = "填充补在了左侧：这里要右侧填充（与第 3 节的 PadEnd、review_dataset 一致）。"
                    else:
                        bug = PAD_HINT
                    raise Mismatch(f"{where}：input_ids = {got_ids.tolist()}，应为 {want_ids.tolist()}。{bug}")
                if got_mask.dtype != np.bool_:
                    raise Mismatch(f"{where}：掩码的 dtype 是 {got_mask.dtype}，应为 bool。")
                if not np.array_equal(got_mask, want_mask):
                    if np.array_equal(got_mask, ~want_mask):
                        bug = "掩码反了：True 应表示“填充、不许看”（与 key_padding_mask 的约定一致）。"
                    elif np.array_equal(got_mask, got_ids == pad_id):
                        bug = (f"这一行里有一个真实的 token，它的 id 恰好等于 pad_id={pad_id}，你的掩码把它也标成了填充："
                               "掩码标的是补上去的位置，不是值等于 pad_id 的位置。")
                    else:
                        bug = PAD_HINT
                    raise Mismatch(f"{where}：mask = {got_mask.astype(int).tolist()}，"
                                   f"应为 {want_mask.astype(int).tolist()}。{bug}")
                if got_ids.dtype != np.int32:
                    raise Mismatch(f"{where}：input_ids 的 dtype 是 {got_ids.dtype}，应为 int32。")
    return run_code_check("ch03.truncate_pad", PAD_HINT, body)
