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
# PyNative on a small (shared) CPU: launch operators synchronously. The default asynchronous
# pipeline hands each operator to other threads; with 2 cores that made eager code ~3-10x
# slower (measured: 32 tokens of KV-cache decoding 11.6-12.5 s -> 1.2-1.3 s; PyNative train
# step 0.9-3.7 s -> 0.26-0.8 s; GRAPH mode unchanged). Not on Ascend machines (CANN
# installed), where asynchronous launch is what keeps the NPU busy. Override with =0.
if not (os.environ.get("ASCEND_HOME_PATH") or os.path.isdir("/usr/local/Ascend")):
    os.environ.setdefault("MS_DEV_LAUNCH_BLOCKING", "1")

from .scale import SCALE, pick  # noqa: E402
from .runtime import setup, seed_everything, interactive, cache_dir  # noqa: E402

__all__ = ["setup", "seed_everything", "interactive", "cache_dir", "SCALE", "pick"]
__version__ = "0.1.0"
