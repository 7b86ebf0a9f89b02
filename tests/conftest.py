"""Shared test setup. Never import mindnlp here: it patches MindSpore process-wide."""
import os

os.environ.setdefault("GLOG_v", "3")
os.environ.setdefault("COURSE_SCALE", "ci")
os.environ.setdefault("COURSE_HEADLESS", "1")

import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _seeded():
    """Every test starts from the same seeds and in PyNative mode on CPU."""
    import course_lib as cl
    cl.setup(device="CPU", mode="pynative", seed=0, quiet=True)
    yield


@pytest.fixture(scope="session")
def tokenizer():
    from course_lib.tokenizer import load_tokenizer
    return load_tokenizer()
