"""Moving PyTorch code and checkpoints to MindSpore, and how MindSpore compiles graphs.

* ``mapping``       — the PyTorch -> MindSpore correspondence table; every row is a
                      numerical check that runs BOTH frameworks on the same inputs.
* ``convert``       — checkpoint converter: PyTorch/Hugging Face ``.safetensors``/``.bin``
                      <-> MindSpore ``.ckpt`` for the course's models, with strict reports.
* ``torch_demo``    — a small, ordinary PyTorch model + training loop (no MindSpore in it).
* ``run_torch_demo``— runs ``torch_demo`` in its own process on real PyTorch, on mindtorch
                      (mindnlp's torch API over MindSpore) or as native MindSpore.
* ``compile_stats`` — counting graph compilations and timing variable-length batches.

Nothing here imports ``torch`` or ``mindnlp`` at import time: ``mindnlp``/``mindtorch``
patch MindSpore process-wide, so they only ever run in a separate process.
"""
