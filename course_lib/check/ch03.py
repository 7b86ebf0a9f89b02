"""Checkers for notebook 03 (mindspore.dataset pipelines)."""
from .common import Mismatch, check_number, exercise, hidden_rng, observe, run_code_check


def _sol(name):
    def factory():
        from ..solutions import ch03
        return getattr(ch03, name)
    factory.__name__ = name
    return factory


# --------------------------------------------------------------------------- numbers
def _ex1() -> int:
    import mindspore.dataset as ds
    data = ds.NumpySlicesDataset(list(range(103)), column_names=["x"], shuffle=False)
    return data.batch(8, drop_remainder=True).repeat(2).get_dataset_size()


@exercise("number", "103 个样本 batch(8, drop_remainder=True).repeat(2) 的批数", solution=_ex1,
          question='`ds.NumpySlicesDataset(list(range(103)), column_names=["x"]).batch(8, drop_remainder=True).repeat(2)` 有多少个批？'
                   "先心算。")
def ex1(answer) -> bool:
    """ds.NumpySlicesDataset(list(range(103)), column_names=["x"]).batch(8,
    drop_remainder=True).repeat(2): how many batches?"""
    return check_number(answer, _ex1(), integer=True, name="ch03.ex1",
                        hint="drop_remainder=True 丢掉不满 8 个的尾巴，repeat(2) 再翻倍。")


def _ex2() -> int:
    from ..data import news_documents
    from ..tokenizer import load_tokenizer
    ids = load_tokenizer().encode_batch(news_documents()[:100])
    return sum(len(x) + 1 for x in ids) // 65      # every row holds block_size + 1 tokens


@exercise("number", "前 100 篇新闻加 <eos> 后 pack_blocks(block_size=64) 的行数", solution=_ex2,
          question="新闻语料的前 100 篇文档（`data.news_documents()[:100]`）分词，"
                   "用 `pack_blocks(..., block_size=64, eos_id=tok.eos_id)` 打包（每篇后由它加 `<eos>`，不要再手动加），得到多少行？")
def ex2(answer) -> bool:
    """The first 100 news documents (course_lib.data.news_documents()[:100]) tokenised,
    each followed by <eos>, packed with pack_blocks(..., block_size=64): how many rows?"""
    return check_number(answer, _ex2(), integer=True, name="ch03.ex2",
                        hint="总 token 数（每篇文档再加一个 <eos>）整除 block_size + 1。")


def _ex3() -> int:
    import numpy as np
    from ..data import review_splits
    from ..tokenizer import load_tokenizer
    texts = [t for t, _ in review_splits().validation]
    lengths = [len(x) for x in load_tokenizer().encode_batch(texts)]
    return int(np.percentile(lengths, 95, method="inverted_cdf"))


@exercise("number", "验证集评论 token 长度的第 95 百分位数（最近秩）", solution=_ex3,
          question="验证集评论（`data.review_splits().validation`）token 长度的第 95 百分位数（最近秩）"
                   "是多少？")
def ex3(answer) -> bool:
    """The 95th percentile (nearest rank) of the token lengths of the *validation* reviews?"""
    return check_number(answer, _ex3(), integer=True, name="ch03.ex3",
                        hint="sources.token_lengths + sources.length_stats(..., (95,)) 里的 p95。")


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


SHIFT_HINT = "input_ids = row[:-1]，labels = row[1:]：每个位置的标签是它的下一个 token。"


@exercise("code", "写 dataset.map 用的变换：打包行 → (input_ids, labels)，标签右移一位",
          solution=_sol("shift_for_lm"),
          wrong=((_sol("wrong_shift_none"), "没有错开"), (_sol("wrong_shift_reversed"), "反了"),
                 (_sol("wrong_shift_full_input"), "row[:-1]")),
          targets=("course_lib.pipelines.BlockSource",),
          question="**语言模型的输入与标签。** 写 `shift_for_lm(row)`："
                   "`row` 是打包后的一行（`BLOCK + 1` 个 token），返回 `(input_ids, labels)`，"
                   "两者都是 int32、长度 `BLOCK`，标签是下一个 token。用法："
                   '`ds.NumpySlicesDataset({"row": blocks}).map(shift_for_lm, input_columns="row", output_columns=["input_ids", "labels"])`。')
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
                                   f"两者都应是 ({block},)。input_ids 是 row[:-1]，不是整行。")
                if np.array_equal(lab, inp):
                    raise Mismatch(f"{where}：labels 与 input_ids 完全相同，没有错开一位：模型只学会抄写输入。")
                if np.array_equal(inp, want_lab) and np.array_equal(lab, want_in):
                    raise Mismatch(f"{where}：input_ids 和 labels 反了：模型在用后一个 token 预测前一个。")
                if not (np.array_equal(inp, want_in) and np.array_equal(lab, want_lab)):
                    raise Mismatch(f"{where}：得到 input_ids={inp.tolist()}、labels={lab.tolist()}。{SHIFT_HINT}")
                if inp.dtype != np.int32 or lab.dtype != np.int32:
                    raise Mismatch(f"{where}：dtype 是 {inp.dtype}/{lab.dtype}，应为 int32（嵌入层要整数 id）。")
    return run_code_check("ch03.shift_for_lm", SHIFT_HINT, body)


PAD_HINT = ("保留前 max_len 个 id（开头往往已表明态度），在右侧补 pad_id 到 max_len；"
            "掩码形状 (max_len,)，填充位置为 True。")


@exercise("code", "写 dataset.map 用的变换：截断（保留开头）+ 右侧填充 + key_padding_mask",
          solution=_sol("truncate_pad"),
          wrong=((_sol("wrong_pad_keeps_end"), "结尾"), (_sol("wrong_pad_mask_inverted"), "反了"),
                 (_sol("wrong_pad_left"), "左侧")),
          targets=("course_lib.classifier.encode_reviews",),
          question="**截断、填充与掩码。** 写 `truncate_pad(ids, max_len=16, pad_id=0)`："
                   "保留**开头**的 `max_len` 个 id，右侧补 `pad_id` 到 `max_len`，"
                   "同时返回 `key_padding_mask`（bool，形状 `(max_len,)`，填充位置为 `True`，"
                   "与[第 01 章](01_cell.ipynb)的约定一致）。它一步做完第 3 节 `Truncate` + `PadEnd` 的事，"
                   "还多给出掩码。")
def truncate_pad(fn) -> bool:
    """``fn(ids, max_len=16, pad_id=0) -> (input_ids int32 (max_len,), mask bool (max_len,))``."""
    def body():
        import numpy as np
        rng = hidden_rng(1)
        fn(np.arange(3, dtype=np.int32), max_len=5, pad_id=0)   # NotImplementedError surfaces here
        for max_len, pad_id in ((6, 0), (9, 2)):
            rows = [rng.integers(3, 900, size=n).astype(np.int32) for n in (1, max_len - 2, max_len, max_len + 5)]
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
                        bug = "截断时保留了结尾：应保留开头 ids[:max_len]。"
                    elif np.array_equal(got_ids[max_len - min(len(ids), max_len):], ids[:max_len]):
                        bug = "填充补在了左侧：这里要右侧填充（与 review_dataset 一致）。"
                    else:
                        bug = PAD_HINT
                    raise Mismatch(f"{where}：input_ids = {got_ids.tolist()}，应为 {want_ids.tolist()}。{bug}")
                if got_mask.dtype != np.bool_:
                    raise Mismatch(f"{where}：掩码的 dtype 是 {got_mask.dtype}，应为 bool。")
                if not np.array_equal(got_mask, want_mask):
                    bug = ("掩码反了：True 应表示“填充、不许看”（与 key_padding_mask 的约定一致）。"
                           if np.array_equal(got_mask, ~want_mask) else PAD_HINT)
                    raise Mismatch(f"{where}：mask = {got_mask.astype(int).tolist()}，"
                                   f"应为 {want_mask.astype(int).tolist()}。{bug}")
                if got_ids.dtype != np.int32:
                    raise Mismatch(f"{where}：input_ids 的 dtype 是 {got_ids.dtype}，应为 int32。")
    return run_code_check("ch03.truncate_pad", PAD_HINT, body)
