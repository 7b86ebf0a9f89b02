RIGHT = {
    "ch03.shift_for_lm": '''from course_lib.check import ch03, show_solution


def shift_for_lm(row):
    row = np.asarray(row, dtype=np.int32)
    return row[:-1], row[1:]


ch03.shift_for_lm(shift_for_lm)
''',
    "ch03.truncate_pad": '''def truncate_pad(ids, max_len=16, pad_id=0):
    ids = np.asarray(ids, dtype=np.int32)[:max_len]
    n = len(ids)
    input_ids = np.full((max_len,), pad_id, dtype=np.int32)
    input_ids[:n] = ids
    key_padding_mask = np.arange(max_len) >= n
    return input_ids, key_padding_mask


ch03.truncate_pad(truncate_pad)
''',
    ("ch03.ex1", "ch03.ex2", "ch03.ex3"): '''ch03.ex1((103 // 8) * 2)
first_100 = tok.encode_batch(data.news_documents()[:100])
ch03.ex2(pipelines.pack_blocks(first_100, 64, eos_id=tok.eos_id).shape[0])
val_lengths = sources.token_lengths([t for t, _ in data.review_splits().validation], tok)
ranked = sorted(val_lengths)
ch03.ex3(ranked[-(-95 * len(ranked) // 100) - 1])    # the ceil(0.95 N)-th, counted from 1
''',
}

WRONG = {
    "ch03.shift_for_lm": ('''from course_lib.check import ch03, show_solution


def shift_for_lm(row):
    row = np.asarray(row, dtype=np.int32)
    return row[1:], row[:-1]


ch03.shift_for_lm(shift_for_lm)
''', {"ch03.shift_for_lm": "后一个 token 预测前一个"}),
    "ch03.truncate_pad": ('''def truncate_pad(ids, max_len=16, pad_id=0):
    ids = np.asarray(ids, dtype=np.int32)[-max_len:]
    n = len(ids)
    input_ids = np.full((max_len,), pad_id, dtype=np.int32)
    input_ids[:n] = ids
    key_padding_mask = np.arange(max_len) >= n
    return input_ids, key_padding_mask


ch03.truncate_pad(truncate_pad)
''', {"ch03.truncate_pad": "保留了结尾"}),
    ("ch03.ex1", "ch03.ex2", "ch03.ex3"): ('''ch03.ex1(-(-103 // 8) * 2)
first_100 = tok.encode_batch(data.news_documents()[:100])
ch03.ex2(pipelines.pack_blocks(first_100, 64, eos_id=tok.eos_id).shape[0])
val_lengths = sources.token_lengths([t for t, _ in data.review_splits().validation], tok)
ch03.ex3(int(np.percentile(val_lengths, 95, method="inverted_cdf")))
''', {"ch03.ex1": "不满的批"}),
}
