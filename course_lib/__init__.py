"""course_lib — the tested reference code behind every notebook of the course.

Import it first in a notebook: it quiets MindSpore's C++ logging (GLOG_v must be set
before MindSpore is imported) and keeps the Hugging Face stack offline.
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
from .runtime import setup, seed_everything, interactive, cache_dir  # noqa: E402



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
