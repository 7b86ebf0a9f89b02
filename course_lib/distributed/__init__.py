"""Distributed training for the course: launching, the data-parallel script, strategies.

* ``launch``     — run a script on N workers with MindSpore's launcher ``msrun``: free port,
                   bounded run time, every process cleaned up on failure, per-rank logs parsed.
* ``train_dp``   — the data-parallel pre-training script (``python -m course_lib.distributed.train_dp``),
                   unchanged from a 2-process CPU run to an 8-NPU Ascend node.
* ``strategies`` — the parallel configurations (data / tensor / pipeline / optimizer
                   sharding / recomputation) an Ascend user writes, and what the CPU build refuses.

Nothing here imports mindnlp (it patches MindSpore process-wide).
"""
