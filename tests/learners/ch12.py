RIGHT = {
    "ch12.admit": '''from course_lib.check import ch12, show_solution


def my_admit(waiting, free_slots, now):
    arrived = sorted((t, rid) for rid, t in waiting if t <= now)
    return [rid for t, rid in arrived[:max(free_slots, 0)]]


ch12.admit(my_admit)
# show_solution("ch12.admit")   # 自己试过之后再看
''',
    "ch12.merge_batches": '''def my_merge_batches(a, b, pad_id=0):
    ids_a, mask_a, cache_a = a
    ids_b, mask_b, cache_b = b
    as_np = lambda x: x.asnumpy() if hasattr(x, "asnumpy") else np.asarray(x)
    width = max(ids_a.shape[1], ids_b.shape[1])

    def pad_left(x, value, axis):
        x = as_np(x)
        widths = [(0, 0)] * x.ndim
        widths[axis] = (width - x.shape[axis], 0)
        return np.pad(x, widths, constant_values=value)

    ids = np.concatenate([pad_left(ids_a, pad_id, 1), pad_left(ids_b, pad_id, 1)])
    mask = np.concatenate([pad_left(mask_a, 0, 1), pad_left(mask_b, 0, 1)])
    cache = [(np.concatenate([pad_left(ka, 0, 2), pad_left(kb, 0, 2)]),
              np.concatenate([pad_left(va, 0, 2), pad_left(vb, 0, 2)]))
             for (ka, va), (kb, vb) in zip(cache_a, cache_b)]
    return ids, mask, cache


ch12.merge_batches(my_merge_batches)
# show_solution("ch12.merge_batches")
''',
    ("ch12.ex1", "ch12.ex2", "ch12.ex3"): '''from course_lib.check import ch12
groups = [4, 4, 2]
ch12.ex1(len(groups) * (1 + (5 - 1)))
width = 64                       # 40 -> the next power of two, and 64 + 20 fits in 2048
slots = 128                       # 64 + 20 = 84 -> the next multiple of 64
ch12.ex2(32 * 2 * 6 * 32 * slots * 128 * 2 / 2**20)
ch12.ex3([0, 0, 0, 1, 1, 1])
''',
}

WRONG = {
    "ch12.admit": ('''from course_lib.check import ch12, show_solution


def my_admit(waiting, free_slots, now):
    arrived = sorted(rid for rid, t in waiting if t <= now)
    return arrived[:max(free_slots, 0)]


ch12.admit(my_admit)
# show_solution("ch12.admit")   # 自己试过之后再看
''', {"ch12.admit": "顺序不对"}),
    "ch12.merge_batches": ('''def my_merge_batches(a, b, pad_id=0):
    ids_a, mask_a, cache_a = a
    ids_b, mask_b, cache_b = b
    as_np = lambda x: x.asnumpy() if hasattr(x, "asnumpy") else np.asarray(x)
    width = max(ids_a.shape[1], ids_b.shape[1])

    def pad_right(x, value, axis):
        x = as_np(x)
        widths = [(0, 0)] * x.ndim
        widths[axis] = (0, width - x.shape[axis])
        return np.pad(x, widths, constant_values=value)

    ids = np.concatenate([pad_right(ids_a, pad_id, 1), pad_right(ids_b, pad_id, 1)])
    mask = np.concatenate([pad_right(mask_a, 0, 1), pad_right(mask_b, 0, 1)])
    cache = [(np.concatenate([pad_right(ka, 0, 2), pad_right(kb, 0, 2)]),
              np.concatenate([pad_right(va, 0, 2), pad_right(vb, 0, 2)]))
             for (ka, va), (kb, vb) in zip(cache_a, cache_b)]
    return ids, mask, cache


ch12.merge_batches(my_merge_batches)
# show_solution("ch12.merge_batches")
''', {"ch12.merge_batches": "真实 token 靠左、填充在右"}),
    ("ch12.ex1", "ch12.ex2", "ch12.ex3"): ('''from course_lib.check import ch12
groups = [4, 4, 2]
ch12.ex1(len(groups) * (1 + 5))
width = 64                       # 40 -> the next power of two, and 64 + 20 fits in 2048
slots = 128                       # 64 + 20 = 84 -> the next multiple of 64
ch12.ex2(32 * 2 * 6 * 32 * slots * 128 * 2 / 2**20)
ch12.ex3([0, 0, 0, 1, 1, 1])
''', {"ch12.ex1": "哪几步调用了模型"}),
}
