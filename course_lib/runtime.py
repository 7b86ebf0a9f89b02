"""One call at the top of every notebook: device, mode, seeds, quiet logs, one status line."""
from __future__ import annotations

import ctypes
import functools
import importlib
import io
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
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
    cap = os.environ.get("COURSE_ASCEND_MEMORY")
    if cap:                 # says what was set: set_memory leaves get_context("max_device_memory")
        ms.runtime.set_memory(max_size=cap)          # as it was (MindSpore 2.7, seen on the CPU)
    return (f"card {ms.get_context('device_id')} | jit_level {ms.get_context('jit_level') or 'O0 (default)'}"
            f" | memory pool {f'<= {cap}' if cap else 'whole card'}")


def setup(device: str | None = None, mode: str = "pynative", seed: int = 42,
          quiet: bool = False) -> RunInfo:
    """Choose the device, set the execution mode, seed everything, print one status line.

    ``mode`` is ``"pynative"`` (eager, the default while learning) or ``"graph"``.
    """
    from .validate import check_setup_args
    check_setup_args(device, mode, seed, quiet, MODES)   # all of them, before any switch
    seed = int(seed)            # NumPy ints too (random.seed rejects them)
    os.environ["HF_HUB_OFFLINE"] = "1"
    import mindspore as ms
    keep_interrupt()            # Jupyter's Interrupt -> KeyboardInterrupt, not a dead kernel
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


@contextmanager
def execution_mode(mode: str):
    """Run a block in ``"graph"`` or ``"pynative"`` mode and restore the previous mode.

    GRAPH mode compiles a Cell as a whole (several times faster per step on CPU); code that
    passes Python objects into the model (KV caches in generation) needs PYNATIVE.
    """
    if mode not in MODES:
        raise ValueError(f"Unknown mode {mode!r}; use one of {tuple(MODES)}.")
    import mindspore as ms
    previous = ms.get_context("mode")
    ms.set_context(mode=MODES[mode])
    try:
        yield
    finally:
        ms.set_context(mode=previous)


def _signature(args) -> tuple:
    return tuple(None if a is None else (tuple(a.shape), a.dtype) for a in args)


def graph_repeater(cell, *args):
    """Call ``cell`` once in GRAPH mode (compiling it for these inputs, or finding the graph
    compiled before) and return (its outputs, ``again``): ``again(*new_args)`` runs THE SAME
    compiled graph on new inputs of the same shapes and dtypes (anything else is refused).

    Why: ``Cell.__call__`` re-checks the Cell, re-keys its arguments and looks the graph up
    at every call, 0.2-0.35 ms on this 2-core CPU (benchmarks/RESULTS.md): 10-15 % of a small
    model's decode step, which calls the same graph hundreds of times. ``again`` goes
    straight to MindSpore's graph executor with the graph's key (MindSpore 2.7 internals:
    ``_cell_graph_executor``, ``_real_phase``); in PyNative mode, or on a MindSpore without
    them, it is ``cell`` itself. Equal outputs: tests/test_generation.py."""
    import mindspore as ms
    out = cell(*args)
    try:
        from mindspore.common.api import _cell_graph_executor, _real_phase
        executor = _cell_graph_executor._graph_executor
        phase = _real_phase(cell.phase, cell)
    except (ImportError, AttributeError):
        return out, cell
    if ms.get_context("mode") != ms.GRAPH_MODE or not executor.has_compiled(phase):
        return out, cell
    expected = _signature(args)

    def again(*new_args):
        if _signature(new_args) != expected:
            raise ValueError(f"graph_repeater: inputs {_signature(new_args)} differ from the "
                             f"compiled graph's {expected}; call the Cell itself.")
        return executor(tuple(a for a in new_args if a is not None), phase)
    return out, again


@contextmanager
def eval_mode(model):
    """``model.set_train(False)`` for the block (dropout off), then the training flag it had.
    A plain callable without ``set_train`` (e.g. an exported graph) passes through."""
    if not hasattr(model, "set_train"):
        yield model
        return
    was_training = bool(getattr(model, "training", False))
    model.set_train(False)
    try:
        yield model
    finally:
        model.set_train(was_training)


# --------------------------------------------------------------------------------------
# A fresh Python process
# --------------------------------------------------------------------------------------
# Some things cannot be undone inside a process: ``import mindnlp``/``mindtorch`` patch
# mindspore.Tensor process-wide, a parallel context is global, a freed-memory bug may crash
# it. ``run_isolated`` calls one module-level function in a new interpreter instead.
_CHILD = "import sys; from course_lib.runtime import _child_main; _child_main(*sys.argv[1:])"
_REPO_ROOT = str(Path(__file__).resolve().parents[1])


def _child_main(module: str, name: str, args_path: str, out_path: str) -> None:
    func = getattr(importlib.import_module(module), name)
    with open(args_path) as f:
        result = func(**json.load(f))
    with open(out_path, "w") as f:
        json.dump(result, f)


class IsolatedError(RuntimeError):
    """The fresh process ended with a non-zero exit code (``.exit_code``)."""

    def __init__(self, exit_code: int, message: str):
        super().__init__(message)
        self.exit_code = exit_code


class IsolatedTimeout(RuntimeError):
    """The fresh process ran longer than its ``timeout`` and was killed (with its children)."""


STDERR_TAIL = 3000        # characters of the child's stderr quoted in an IsolatedError


class Isolated:
    """A :func:`run_isolated` call started in the background; ``result()`` waits for it.

    The child has no stdin, its stdout goes nowhere, it leads its own process group (so a
    timeout kills whatever it started too) and runs in ``cwd`` (default: this process's)."""

    def __init__(self, func, kwargs: dict, timeout: float, env: dict | None, then=None,
                 cwd: str | os.PathLike | None = None):
        module, name = getattr(func, "__module__", None), getattr(func, "__qualname__", "")
        if not module or module == "__main__" or "." in name or "<" in name:
            raise ValueError(f"run_isolated needs a function defined at the top level of an "
                             f"importable module, got {func!r} (module {module!r}).")
        if cwd is not None and not Path(cwd).is_dir():
            raise NotADirectoryError(f"run_isolated: cwd {str(cwd)!r} is not a directory.")
        self.what, self.timeout, self._then = f"{module}.{name}", float(timeout), then
        self._dir = tempfile.TemporaryDirectory(prefix="course_isolated_")
        self._out = Path(self._dir.name) / "result.json"
        args_path = Path(self._dir.name) / "args.json"
        try:
            args_path.write_text(json.dumps(kwargs))
        except TypeError as err:
            self._dir.cleanup()
            raise TypeError(f"run_isolated passes arguments as JSON: {err}") from None
        env = dict(env or {})
        path = os.pathsep.join(p for p in (env.pop("PYTHONPATH", None), _REPO_ROOT,
                                           os.environ.get("PYTHONPATH")) if p)
        child_env = dict(os.environ, GLOG_v="3", PYTHONUNBUFFERED="1", **env, PYTHONPATH=path)
        self._stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _CHILD, module, name, str(args_path), str(self._out)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self._stderr,
            env=child_env, cwd=cwd, start_new_session=True)
        self.started = time.monotonic()

    def done(self) -> bool:
        """The child has ended, or has used up its time (``result()`` will not wait)."""
        return self.proc.poll() is not None or time.monotonic() - self.started >= self.timeout

    def _kill(self) -> None:
        """SIGKILL the child's whole process group (what it started dies with it)."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()

    def _stderr_tail(self) -> str:
        size = self._stderr.seek(0, os.SEEK_END)
        self._stderr.seek(max(0, size - 4 * STDERR_TAIL))      # never reads megabytes
        return self._stderr.read().decode("utf-8", "replace")[-STDERR_TAIL:]

    def result(self):
        """The function's return value (JSON round trip); :class:`IsolatedError` with the
        child's stderr if it failed or crashed, :class:`IsolatedTimeout` if it ran longer
        than ``timeout`` seconds (counted from its start)."""
        try:
            try:
                left = self.timeout - (time.monotonic() - self.started)
                code = self.proc.wait(timeout=max(left, 0.01))
            except subprocess.TimeoutExpired:
                raise IsolatedTimeout(f"{self.what} in a fresh process did not finish within "
                                      f"{self.timeout:g} s and was killed.") from None
            if code != 0:
                raise IsolatedError(code, f"{self.what} in a fresh process failed (exit code "
                                    f"{code}):\n{self._stderr_tail()}")
            value = json.loads(self._out.read_text())
        finally:
            if self.proc.poll() is None:       # timeout, or this process was interrupted
                self._kill()
            self._stderr.close()
            self._dir.cleanup()
        return value if self._then is None else self._then(value)


def run_isolated(func, /, *, timeout: float = 600, env: dict | None = None,
                 background: bool = False, then=None, cwd: str | os.PathLike | None = None,
                 **kwargs):
    """``func(**kwargs)`` in a new Python interpreter; returns what it returned.

    ``func`` must be a top-level function of an importable module; ``kwargs`` and the return
    value travel as JSON (large arrays: write a file, return its path). ``env`` adds
    environment variables (GLOG_v=3 is set; a ``PYTHONPATH`` in it goes first); ``cwd`` is
    the child's working directory. ``then(value)``, if given, runs in this process on the
    returned value (e.g. loads the files the child wrote) and its result is returned instead.
    ``background=True`` returns an :class:`Isolated` at once; its ``result()`` waits. A child
    that outlives ``timeout`` is killed with every process it started."""
    job = Isolated(func, kwargs, timeout, env, then, cwd)
    return job if background else job.result()


def turn_order(items, round_index: int) -> list:
    """The order in which ``items`` take their turn in round ``round_index`` (from 0) of an
    alternating measurement: as given in even rounds, reversed in odd ones, so that neither
    goes first every time (a load that rises or falls during a round then falls on both)."""
    items = list(items)
    return items if round_index % 2 == 0 else items[::-1]


def interactive() -> bool:
    """False when notebooks run headless (``make test``/``make course`` set COURSE_HEADLESS=1):
    widgets and live plots then fall back to a final static picture."""
    return os.environ.get("COURSE_HEADLESS", "0") != "1"


def progress(iterable=None, **kwargs):
    """A tqdm progress bar: the live widget in JupyterLab; headless (``make record``, tests)
    one text line printed when the bar closes, so a stored notebook shows the finished bar
    ("100%| 400/400 [...]", or where an early stop left it), never one frozen at 0%."""
    if interactive():
        from tqdm.auto import tqdm
        return tqdm(iterable, **kwargs)
    kwargs.pop("dynamic_ncols", None)
    kwargs.setdefault("ascii", False)
    return _final_bar()(iterable, file=io.StringIO(), mininterval=float("inf"), ncols=100, **kwargs)


@functools.lru_cache(maxsize=None)
def _final_bar():
    from tqdm.std import tqdm

    class FinalBar(tqdm):
        """Draws nothing while it runs; prints its final state once, when closed."""

        def close(self):
            if not self.disable and not getattr(self, "_printed", False):
                self._printed = True
                print(str(self), flush=True)
            super().close()
    return FinalBar


def shown(text) -> str:
    """``text`` (a path, a message, a command line) as a notebook should print it: the
    course's folder as ``.`` and the cache folder as ``.cache``, so stored outputs read the
    same on every machine and carry no one's home or checkout path."""
    out = str(text)
    cache = os.environ.get("COURSE_CACHE_DIR")
    if cache:
        out = out.replace(str(Path(cache).resolve()), ".cache").replace(cache.rstrip("/"), ".cache")
    root = str(Path(__file__).resolve().parents[1])
    out = out.replace(root + os.sep, "." + os.sep).replace(root, ".")
    venv = str(Path(sys.prefix).resolve())
    if venv != str(Path(sys.base_prefix).resolve()):          # a virtual environment elsewhere
        out = out.replace(venv + os.sep, "<venv>" + os.sep)
    return out


def cache_dir(*parts: str) -> Path:
    """Where derived artefacts (cleaned corpora, trained checkpoints) live.

    ``COURSE_CACHE_DIR`` overrides; default ``<repo>/.cache`` (git-ignored)."""
    env = os.environ.get("COURSE_CACHE_DIR")
    root = Path(env or Path(__file__).resolve().parents[1] / ".cache")
    path = root.joinpath(*parts)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as err:
        where = f"COURSE_CACHE_DIR={env!r}" if env else f"the default cache {root}"
        raise NotADirectoryError(
            f"Cannot use {path} as a cache directory: {err.filename or path} is a file, not a "
            f"directory ({where}). Point COURSE_CACHE_DIR at a directory (or unset it) and "
            "rerun.") from err
    return path


# --------------------------------------------------------------------------------------
# Interrupt (Jupyter's Stop button, Ctrl-C)
# --------------------------------------------------------------------------------------
# MindSpore's C++ runtime installs its own SIGINT handler (on the first PyNative operator
# and at the start of EVERY graph run) that answers SIGINT with kill(getpid(), SIGTERM):
# the kernel dies and its state is lost. MindSpore has no switch to turn this off, so we
# let its handler be and turn the SIGTERM it sends into KeyboardInterrupt. A SIGTERM that
# arrives while Python (not MindSpore) owns SIGINT is a real "terminate" and is honoured.
#
# WHERE the KeyboardInterrupt is raised matters. Python runs a signal handler between two
# bytecodes of whatever Python code runs next, and while MindSpore compiles (or looks up) a
# graph its C++ compiler calls back into Python hundreds of times per call (the parser's
# hooks in mindspore/_extends, attribute lookups of the Cells); an exception raised in one of
# those callbacks can be caught by the C++ caller and dropped, and the Interrupt is lost
# (measured: about 1 in 40 Interrupts of a generation loop before this was handled). So an
# Interrupt that lands inside the compiler is owed, not raised: it is asked for again every
# millisecond until the compiler has returned to ordinary Python code, and raised there.
_state = {"installed": False, "previous_term": signal.SIG_DFL, "python_handler": None,
          "deferring": 0, "pending": False, "owed": None, "asked": False, "compiler": None}


class _SigAction(ctypes.Structure):   # struct sigaction, Linux x86_64/aarch64 glibc layout
    _fields_ = [("handler", ctypes.c_void_p), ("mask", ctypes.c_ulong * 16),
                ("flags", ctypes.c_int), ("restorer", ctypes.c_void_p)]


def _c_handler(signum: int) -> int | None:
    """Address of the C-level handler of ``signum`` (None where it cannot be read)."""
    if not sys.platform.startswith("linux"):
        return None
    action = _SigAction()
    if ctypes.CDLL(None).sigaction(signum, None, ctypes.byref(action)) != 0:
        return None
    return action.handler or 0


def mindspore_owns_sigint() -> bool:
    """True while MindSpore's C++ handler (not Python's) receives SIGINT."""
    current = _c_handler(signal.SIGINT)
    return current not in (None, 0, 1, _state["python_handler"])


def _compiler_files() -> tuple[str, str]:
    """(mindspore/common/api.py, mindspore/_extends/): the Python side of MindSpore's compiler."""
    if _state["compiler"] is None:
        import mindspore
        root = os.path.dirname(os.path.abspath(mindspore.__file__))
        _state["compiler"] = (os.path.join(root, "common", "api.py"),
                              os.path.join(root, "_extends") + os.sep)
    return _state["compiler"]


def inside_compiler(frame) -> bool:
    """True while ``frame`` runs under MindSpore's graph compiler: a frame of its Python side
    (``mindspore/_extends``) or of ``common/api.py``'s ``compile`` (which calls the C++
    compiler, whose callbacks into Python sit above it) is on the stack."""
    api, extends = _compiler_files()
    while frame is not None:
        name = frame.f_code.co_filename
        if name.startswith(extends) or (name == api and frame.f_code.co_name == "compile"):
            return True
        frame = frame.f_back
    return False


def _interrupt(message: str = "", frame=None) -> None:
    """Raise KeyboardInterrupt here, hold it (inside ``defer_interrupt``), or owe it (inside
    the compiler: asked again shortly, see the comment above)."""
    if _state["deferring"]:
        _state["pending"] = True       # raised when the deferred section ends
        return
    if frame is not None and inside_compiler(frame):
        _owe(message)
        return
    with _ASKING:
        _state["owed"] = None
    raise KeyboardInterrupt(message)


_ASKING = threading.RLock()    # reentrant: a handler may run inside a handler
ASK_EVERY = 0.001                      # seconds between two asks while an Interrupt is owed


def _owe(message: str) -> None:
    """Remember the Interrupt and have a helper thread ask Python to run the SIGTERM handler
    again every ASK_EVERY seconds until it is raised. (Asking from the handler itself would
    run it again at once, nested inside itself, while the compiler is still below.)"""
    with _ASKING:
        first = _state["owed"] is None
        _state["owed"] = message
    if first:
        threading.Thread(target=_ask_again, name="course-interrupt", daemon=True).start()


def _ask_again() -> None:
    import _thread
    while True:
        with _ASKING:
            if _state["owed"] is None:
                return
            _state["asked"] = True     # the SIGTERM handler call this causes is not a terminate
            _thread.interrupt_main(signal.SIGTERM)
        time.sleep(ASK_EVERY)


def _on_sigint(signum, frame):
    """Python's own SIGINT handler while keep_interrupt is on (MindSpore's replaces it at
    every graph run): Python's KeyboardInterrupt, but never inside the compiler."""
    return _interrupt("", frame)


def _on_sigterm(signum, frame):
    asked, _state["asked"] = _state["asked"], False
    if _state["owed"] is not None:     # an Interrupt that landed inside the compiler
        return _interrupt(_state["owed"], frame)
    if asked:                          # a last ask, sent as the owed Interrupt was raised
        return None
    if not mindspore_owns_sigint():    # a genuine terminate request: behave as before
        previous = _state["previous_term"]
        if callable(previous):
            return previous(signum, frame)
        if previous == signal.SIG_IGN:
            return None
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
        return None
    signal.signal(signal.SIGINT, signal.getsignal(signal.SIGINT))   # take SIGINT back
    return _interrupt("interrupted (SIGINT forwarded by MindSpore's handler)", frame)


def _own_sigint(*_) -> None:
    """Python's SIGINT handler -> :func:`_on_sigint` (when it is Python's default)."""
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _on_sigint)


def keep_interrupt() -> bool:
    """Make SIGINT (Jupyter's Interrupt, Ctrl-C) raise ``KeyboardInterrupt`` in MindSpore
    code instead of ending the process, never inside MindSpore's compiler (where it could be
    dropped). Idempotent; a no-op outside the main thread. In IPython, Python's SIGINT
    handler is set anew before every cell (ipykernel puts its default back at each cell).
    Returns whether the translation is active."""
    if _state["installed"]:
        return True
    if threading.current_thread() is not threading.main_thread():
        return False
    _compiler_files()
    _state["previous_term"] = signal.signal(signal.SIGTERM, _on_sigterm)
    _state["python_handler"] = _c_handler(signal.SIGTERM)   # Python's C trampoline
    _own_sigint()
    shell = sys.modules.get("IPython") and sys.modules["IPython"].get_ipython()
    if shell is not None and hasattr(shell, "events"):
        shell.events.register("pre_run_cell", _own_sigint)
    _state["installed"] = True
    return True


@contextmanager
def defer_interrupt():
    """Hold a SIGINT that arrives inside the block and raise ``KeyboardInterrupt`` when
    the block ends: a training step and its bookkeeping finish together (no optimizer
    step without its counter, no batch drawn and lost)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    keep_interrupt()
    _state["deferring"] += 1
    previous = signal.signal(signal.SIGINT, _on_sigint)
    if previous is None:             # a handler installed from C: Python's default instead
        previous = signal.default_int_handler
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)    # also takes SIGINT back from MindSpore
        _state["deferring"] -= 1
        if not _state["deferring"] and _state["pending"]:
            _state["pending"] = False
            raise KeyboardInterrupt("interrupted; the step that was running finished first")
