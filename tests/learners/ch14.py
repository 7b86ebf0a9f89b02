RIGHT = {
    "ch14.pad_to_bucket": '''from course_lib.check import ch14, show_solution


def my_pad_to_bucket(inputs, labels, buckets, pad_id=0):
    T = inputs.shape[1]
    fitting = [b for b in buckets if b >= T]
    if not fitting:
        raise ValueError(f"batch length {T} is longer than the largest bucket {max(buckets)}: "
                         f"add a bucket of at least {T} or truncate the batch (max_len) to {max(buckets)}.")
    extra = min(fitting) - T
    inputs = np.pad(inputs, ((0, 0), (0, extra)), constant_values=pad_id)
    labels = np.pad(labels, ((0, 0), (0, extra)), constant_values=-100)   # IGNORE_INDEX
    return inputs, labels


ch14.pad_to_bucket(my_pad_to_bucket)
# show_solution("ch14.pad_to_bucket")   # 自己试过之后再看
''',
    "ch14.dynamic_inputs": '''def my_dynamic_inputs(examples, dynamic_axes):
    placeholders = []
    for example in examples:
        rank = example.ndim
        axes = {a % rank for a in dynamic_axes}
        shape = [None if i in axes else int(n) for i, n in enumerate(example.shape)]
        placeholders.append(Tensor(shape=shape, dtype=Tensor(example).dtype))
    return placeholders


ch14.dynamic_inputs(my_dynamic_inputs)
# show_solution("ch14.dynamic_inputs")
''',
    ("ch14.ex1", "ch14.ex2", "ch14.ex3"): '''from course_lib.check import ch14
T = (12, 20, 12, 33, 20, 8)
t = (0.7, 0.7, 1.0, 0.7, 0.7, 1.0)
ch14.ex1(len(set(zip(T, t))))                                      # one graph per new (shape, float value)
ch14.ex2(len({min(b for b in (16, 32, 64) if b >= n) for n in T}))  # one graph per bucket used
ch14.ex3(Tensor(shape=[1, None, 64], dtype=ms.float16))
''',
}

WRONG = {
    "ch14.pad_to_bucket": ('''from course_lib.check import ch14, show_solution


def my_pad_to_bucket(inputs, labels, buckets, pad_id=0):
    T = inputs.shape[1]
    fitting = [b for b in buckets if b >= T]
    if not fitting:
        raise ValueError(f"batch length {T} is longer than the largest bucket {max(buckets)}: "
                         f"add a bucket of at least {T} or truncate the batch (max_len) to {max(buckets)}.")
    extra = min(fitting) - T
    inputs = np.pad(inputs, ((0, 0), (extra, 0)), constant_values=pad_id)
    labels = np.pad(labels, ((0, 0), (extra, 0)), constant_values=-100)   # IGNORE_INDEX
    return inputs, labels


ch14.pad_to_bucket(my_pad_to_bucket)
# show_solution("ch14.pad_to_bucket")   # 自己试过之后再看
''', {"ch14.pad_to_bucket": "补在了左边"}),
    "ch14.dynamic_inputs": ('''def my_dynamic_inputs(examples, dynamic_axes):
    placeholders = []
    for example in examples:
        rank = example.ndim
        axes = {a % rank for a in dynamic_axes}
        shape = [None if i in axes else int(n) for i, n in enumerate(example.shape)]
        placeholders.append(Tensor(shape=shape, dtype=ms.int32))
    return placeholders


ch14.dynamic_inputs(my_dynamic_inputs)
# show_solution("ch14.dynamic_inputs")
''', {"ch14.dynamic_inputs": "dtype 与真实输入不一致"}),
    ("ch14.ex1", "ch14.ex2", "ch14.ex3"): ('''from course_lib.check import ch14
T = (12, 20, 12, 33, 20, 8)
t = (0.7, 0.7, 1.0, 0.7, 0.7, 1.0)
ch14.ex1(len(set(T)))                                               # one graph per new shape
ch14.ex2(len({min(b for b in (16, 32, 64) if b >= n) for n in T}))  # one graph per bucket used
ch14.ex3(Tensor(shape=[1, None, 64], dtype=ms.float16))
''', {"ch14.ex1": "编译好的图按什么查找"}),
}
