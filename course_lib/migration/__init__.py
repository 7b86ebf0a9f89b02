"""Moving PyTorch code and checkpoints to MindSpore, and how MindSpore compiles graphs.

* ``mapping``        — the PyTorch -> MindSpore correspondence table; every row is a
                       numerical check that runs BOTH frameworks on the same inputs.
* ``convert``        — checkpoint converter: PyTorch/Hugging Face ``.safetensors``/``.bin``
                       <-> MindSpore ``.ckpt`` for the course's models, with strict reports
                       (builds on ``course_lib.hf_weights``).
* ``torch_demo``     — a small, ordinary PyTorch model + training loop (no MindSpore in it).
* ``native_demo``    — the same model translated to native MindSpore with the mapping table.
* ``demo_data``      — initial weights and batches shared by every backend of the demo.
* ``run_torch_demo`` — runs the demo on real PyTorch, on mindtorch (in its own process) or
                       natively, measures what works, and times the loops phase by phase
                       (one fresh process per backend and dispatch).
* ``compile_stats``  — counting graph compilations; static/bucketed/dynamic/auto shapes;
                       the attention bias built by graph operators (a declared dynamic shape).
* ``step_modes``     — one training step four ways (eager function, ``@ms.jit`` in PyNative,
                       the same in GRAPH mode, the ``TrainStep`` Cell), each pair one change
                       apart, under both PyNative dispatches, each run in a fresh process.

Nothing here imports ``torch`` or ``mindnlp`` at import time: ``mindnlp``/``mindtorch``
patch MindSpore process-wide, so they only ever run in a separate process.
"""
