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

from .scale import SCALE, pick  # noqa: E402
from .runtime import setup, seed_everything, interactive, cache_dir  # noqa: E402

__all__ = ["setup", "seed_everything", "interactive", "cache_dir", "SCALE", "pick"]
__version__ = "0.1.0"
