RIGHT = {
    "ch10.shard_source": '''from course_lib.check import ch10, show_solution


class MyShardedSource:
    def __init__(self, source, rank, world):
        self.source, self.rank, self.world = source, rank, world

    def __len__(self):
        return -(-len(self.source) // self.world)

    def __getitem__(self, i):
        if not 0 <= i < len(self):
            raise IndexError(i)
        return self.source[(self.rank + i * self.world) % len(self.source)]


ch10.shard_source(MyShardedSource)
# show_solution("ch10.shard_source")   # 自己试过之后再看
''',
    "ch10.grad_average": '''import numpy as np


def my_average_then_clip(rank_grads, max_norm):
    world = len(rank_grads)
    mean = [sum(g[i] for g in rank_grads) / world for i in range(len(rank_grads[0]))]
    norm = np.sqrt(sum(float(np.sum(g.astype(np.float64) ** 2)) for g in mean))
    scale = min(1.0, max_norm / norm) if norm > 0 else 1.0
    return [g * scale for g in mean]


ch10.grad_average(my_average_then_clip)
# show_solution("ch10.grad_average")
''',
    ("ch10.ex1", "ch10.ex2", "ch10.ex3"): '''from course_lib.check import ch10
n = big.num_parameters()
ch10.ex1(round(n * (2 + 2 + 12 / 16) / memory.GiB, 2))     # fp16 weights and grads whole; master, m, v / 16
h, f = big.hidden_size, big.intermediate_size
ch10.ex2((3 * h * h + h * h + 3 * h * f) // 8 + 2 * h)
mb = 1
while memory.plan(big, 32, memory.Layout(dp=16, zero=3, recompute=True, micro_batch=mb + 1)).fits:
    mb += 1
ch10.ex3(mb)
''',
}

WRONG = {
    "ch10.shard_source": ('''from course_lib.check import ch10, show_solution


class MyShardedSource:
    def __init__(self, source, rank, world):
        self.source, self.rank, self.world = source, rank, world

    def __len__(self):
        return len(self.source) // self.world

    def __getitem__(self, i):
        if not 0 <= i < len(self):
            raise IndexError(i)
        return self.source[self.rank + i * self.world]


ch10.shard_source(MyShardedSource)
# show_solution("ch10.shard_source")   # 自己试过之后再看
''', {"ch10.shard_source": "条数相同"}),
    "ch10.grad_average": ('''import numpy as np


def my_average_then_clip(rank_grads, max_norm):
    clipped = []
    for grads in rank_grads:
        norm = np.sqrt(sum(float(np.sum(g.astype(np.float64) ** 2)) for g in grads))
        scale = min(1.0, max_norm / norm) if norm > 0 else 1.0
        clipped.append([g * scale for g in grads])
    world = len(clipped)
    return [sum(g[i] for g in clipped) / world for i in range(len(clipped[0]))]


ch10.grad_average(my_average_then_clip)
# show_solution("ch10.grad_average")
''', {"ch10.grad_average": "先裁剪、后平均"}),
    ("ch10.ex1", "ch10.ex2", "ch10.ex3"): ('''from course_lib.check import ch10
n = big.num_parameters()
ch10.ex1(round(n * (2 + 2 + 12 / 16) / memory.GiB, 2))     # fp16 weights and grads whole; master, m, v / 16
h, f = big.hidden_size, big.intermediate_size
ch10.ex2((3 * h * h + h * h + 3 * h * f) // 8)
import math
state = memory.training_state_bytes(big.num_parameters()).total / 16
act = memory.per_device_memory(big, memory.Layout(dp=16, zero=3, recompute=True)).activations
ch10.ex3(math.ceil((32 * memory.GiB - state) / act))
''', {"ch10.ex2": "哪些参数不在计划里",
                                                      "ch10.ex3": "加 1 之后还放得下吗"}),
}
