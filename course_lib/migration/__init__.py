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
                       natively, and measures what works.
* ``compile_stats``  — counting graph compilations; static/bucketed/dynamic/auto shapes.
* ``step_modes``     — one training step in PyNative, as an ``@ms.jit`` function, in GRAPH mode.

Nothing here imports ``torch`` or ``mindnlp`` at import time: ``mindnlp``/``mindtorch``
patch MindSpore process-wide, so they only ever run in a separate process.
"""
