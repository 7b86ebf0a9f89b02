"""course_lib — the tested reference code behind every notebook of the course.

Import it first in a notebook: it quiets MindSpore's C++ logging (GLOG_v must be set
before MindSpore is imported) and keeps the Hugging Face stack offline.

Where the code of a chapter lives (the modules each notebook imports; the modules are flat,
one topic each, like nanoGPT's and d2l's; ``course_lib.check`` serves every chapter,
``course_lib.solutions`` holds the exercise answers, ``course_lib.grade`` runs a class's
exercise cells against those checkers (``python -m course_lib.grade``, docs/instructors.md); ``tests/test_course_map.py`` keeps
this table equal to the notebooks' imports):

    00 setup and tour ............ data, runtime, tokenizer
    01 nn.Cell ................... blocks
    02 the Model API ............. blocks, classifier, data, measure, sources, tokenizer
    03 mindspore.dataset ......... data, pipelines, sources, tokenizer
    04 callbacks ................. callbacks, classifier, data, metrics, plots, runtime,
                                   tokenizer, training
    05 LLMTrainer ................ blocks, callbacks, data, internlm, measure, pipelines,
                                   plots, runtime, tokenizer, trainer, training
    06 building Baichuan-13B ..... baichuan, hf_weights, internlm, layers, memory, pretrained,
                                   tokenizer, training
    07 pre-training, generation .. baichuan, callbacks, data, experiments, generation,
                                   hf_weights, layers, memory, pipelines, plots, pretrained,
                                   runtime, tokenizer, trainer, zoo
    08 InternLM + LoRA ........... data, experiments, generation, internlm, lora, measure,
                                   memory, pipelines, sft, zoo
    09 merge, export, deploy ..... export, lora, sft, zoo
    10 distributed training ...... baichuan, distributed, memory
    11 mindnlp interop ........... data, families, internlm, interop, runtime, solutions,
                                   tokenizer
    12 inference engineering ..... data, engine, experiments, export, folded, generation,
                                   inference, lora, runtime, zoo
    13 PyTorch migration ......... baichuan, families, hf_weights, internlm, migration,
                                   training
    14 dynamic shapes, compiling . baichuan, data, migration, pipelines, runtime, tokenizer,
                                   training
    15 real checkpoints .......... baichuan, conversation, families, finetune, hf_weights,
                                   internlm, lookalike, memory, pretrained
    16 your own model ............ callbacks, conversation, experiments, export, families,
                                   finetune, folded, generation, lookalike, lora, memory,
                                   own_model, pipelines, plots, realsize, runtime, trainer

Underneath, imported by the modules above: ``scale`` (``cl.pick``), ``validate`` (input
checks), ``safeio`` (atomic writes), ``facts`` (``cl.fact``: a stated fact printed and asserted), ``hf_tokenizer``, ``measure`` and ``experiments`` (timings for notebooks and benchmarks).

Import rule. A notebook starts with ``import course_lib as cl`` and ``cl.setup()``, then
imports modules by name (``from course_lib import layers`` or ``from course_lib.layers
import Attention``). Inside ``course_lib`` a module imports MindSpore, NumPy and the
course modules it uses at the top. A function imports late only (1) an optional or foreign
package (torch, transformers, mindnlp, tqdm, matplotlib), (2) a module that would make an
import cycle, or (3) in code that must stay importable before MindSpore is (``runtime``,
``scale``, this file, the fresh-process side of ``runtime.run_isolated``).
"""
import os

# Must happen before `import mindspore` anywhere in the process.
os.environ.setdefault("GLOG_v", "3")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("DIFFUSERS_VERBOSITY", "error")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from .scale import pick  # noqa: E402
from .runtime import setup, seed_everything, interactive, cache_dir, shown  # noqa: E402
from .facts import fact, FactError  # noqa: E402



def from_pretrained(path, dtype: str = "float16", **kwargs):
    """A real Baichuan-13B/-7B or InternLM-7B directory as the course model
    (``course_lib.pretrained.from_pretrained``)."""
    from .pretrained import from_pretrained as _from_pretrained
    return _from_pretrained(path, dtype, **kwargs)


def load_hf_tokenizer(path):
    """The SentencePiece tokenizer of a model directory (``course_lib.hf_tokenizer``)."""
    from .hf_tokenizer import load_hf_tokenizer as _load
    return _load(path)


def chat(model, tokenizer, messages, max_new_tokens: int = 64, **kwargs) -> str:
    """Reply in the model family's own chat format, streamed (``course_lib.conversation.chat``)."""
    from .conversation import chat as _chat
    return _chat(model, tokenizer, messages, max_new_tokens, **kwargs)


__all__ = ["setup", "seed_everything", "interactive", "cache_dir", "pick",
           "from_pretrained", "load_hf_tokenizer", "chat"]
__version__ = "0.1.0"
