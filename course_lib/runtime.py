"""One call at the top of every notebook: device, mode, seeds, quiet logs, one status line."""
from __future__ import annotations

import os
import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .scale import current_scale

DEVICES = ("Ascend", "GPU", "CPU")
MODES = {"graph": 0, "pynative": 1}  # values of mindspore.GRAPH_MODE / PYNATIVE_MODE


@dataclass(frozen=True)
class RunInfo:
    device: str
    mode: str
    seed: int
    scale: str
    mindspore: str

    def __str__(self) -> str:
        return (f"MindSpore {self.mindspore} | device {self.device} | mode {self.mode} | "
                f"seed {self.seed} | COURSE_SCALE={self.scale}")


def _normalise_device(name: str) -> str:
    for d in DEVICES:
        if name.strip().lower() == d.lower():
            return d
    raise ValueError(f"Unknown device {name!r}. Choose one of {DEVICES} "
                     "(or unset COURSE_DEVICE to pick the best available).")


def available_devices() -> list[str]:
    """Devices the *installed* MindSpore build can run on, best first."""
    from mindspore import device_context as dc
    found = []
    for name, mod in (("Ascend", dc.ascend), ("GPU", dc.gpu), ("CPU", dc.cpu)):
        try:
            if mod.is_available():
                found.append(name)
        except Exception:  # a backend plugin that fails to load counts as absent
            pass
    return found


def choose_device(requested: str | None = None) -> str:
    """Ascend > GPU > CPU, unless ``requested`` (or env ``COURSE_DEVICE``) names one."""
    requested = requested or os.environ.get("COURSE_DEVICE") or None
    avail = available_devices()
    if requested is None:
        return avail[0]
    device = _normalise_device(requested)
    if device not in avail:
        raise RuntimeError(f"Device {device} was requested but this MindSpore build only "
                           f"supports {avail}. Install the {device} build of MindSpore or "
                           "choose another device.")
    return device


def seed_everything(seed: int = 42) -> None:
    """Python, NumPy and MindSpore (global seed + dataset shuffles) in one call."""
    import mindspore as ms
    import mindspore.dataset as ds
    random.seed(seed)
    np.random.seed(seed)
    ms.set_seed(seed)
    ds.config.set_seed(seed)


def _ascend_settings(ms) -> str:
    """Ascend only (e.g. a ModelArts image): card ``DEVICE_ID`` (default 0), memory pool capped
    by ``COURSE_ASCEND_MEMORY`` (e.g. "30GB"; default the whole card), ``jit_level`` left at
    mindspore.jit's default O0. Returns what was set, for the status line."""
    device_id = os.environ.get("DEVICE_ID")
    ms.set_device("Ascend", *([int(device_id)] if device_id else []))
    if os.environ.get("COURSE_ASCEND_MEMORY"):
        ms.runtime.set_memory(max_size=os.environ["COURSE_ASCEND_MEMORY"])
    memory = ms.get_context("max_device_memory")
    return (f"card {ms.get_context('device_id')} | jit_level {ms.get_context('jit_level') or 'O0'}"
            f" | memory pool {'whole card' if memory >= 1024 else f'<= {memory:g} GB'}")


def setup(device: str | None = None, mode: str = "pynative", seed: int = 42,
          quiet: bool = False) -> RunInfo:
    """Choose the device, set the execution mode, seed everything, print one status line.

    ``mode`` is ``"pynative"`` (eager, the default while learning) or ``"graph"``.
    """
    if mode not in MODES:
        raise ValueError(f"Unknown mode {mode!r}; use 'pynative' or 'graph'.")
    os.environ["HF_HUB_OFFLINE"] = "1"
    import mindspore as ms
    dev = choose_device(device)
    ascend = _ascend_settings(ms) if dev == "Ascend" else None
    if ascend is None:
        ms.set_device(dev)
    ms.set_context(mode=MODES[mode])
    seed_everything(seed)
    info = RunInfo(device=dev, mode=mode, seed=seed, scale=current_scale(),
                   mindspore=ms.__version__)
    if not quiet:
        print(info if ascend is None else f"{info} | {ascend}")
    return info


def interactive() -> bool:
    """False when notebooks run headless (``make test``/``make course`` set COURSE_HEADLESS=1):
    widgets and live plots then fall back to a final static picture."""
    return os.environ.get("COURSE_HEADLESS", "0") != "1"


def cache_dir(*parts: str) -> Path:
    """Where derived artefacts (cleaned corpora, trained checkpoints) live.

    ``COURSE_CACHE_DIR`` overrides; default ``<repo>/.cache`` (git-ignored)."""
    root = Path(os.environ.get("COURSE_CACHE_DIR")
                or Path(__file__).resolve().parents[1] / ".cache")
    path = root.joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path
