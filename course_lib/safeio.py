"""Crash-safe file writes: the old file stays intact until the new one is complete.

Every writer goes to a temporary file in the SAME directory, flushes it to disk (fsync),
then ``os.replace``-s it over the target (atomic on POSIX), and fsyncs the directory so the
rename itself survives a power cut. A run killed at any moment leaves either the previous
good file or the new one, never a torn or missing file; the temporary is removed on any
error. (``mindspore.save_checkpoint`` deletes the target before writing: it is only ever
pointed at the temporary here.)

    atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))
    write_text_atomic(path, json.dumps(obj))
    save_checkpoint_atomic(cell_or_list, path, append_dict=meta)
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

TMP_PREFIX = ".tmp-"


def temp_path_for(path: Path) -> Path:
    """``dir/.tmp-<pid>-<name>``: hidden, same directory (same file system), same suffix
    (MindSpore insists on ``.ckpt``), unique per process."""
    return path.with_name(f"{TMP_PREFIX}{os.getpid()}-{path.name}")


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:      # some file systems do not allow opening a directory
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_temps(path: Path) -> list[Path]:
    """Delete temporaries of ``path`` left by writers that were killed (their process is
    gone); a concurrent writer's temporary is left alone."""
    removed = []
    for tmp in path.parent.glob(f"{TMP_PREFIX}*-{path.stem}*"):
        pid = tmp.name[len(TMP_PREFIX):].split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            tmp.unlink(missing_ok=True)
            removed.append(tmp)
    return removed


def atomic_write(path, writer: Callable[[Path], object]) -> Path:
    """Call ``writer(tmp_path)`` to write the content, then move it over ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(path)
    tmp = temp_path_for(path)
    try:
        writer(tmp)
        if not tmp.is_file():
            raise RuntimeError(f"The writer for {path} did not create {tmp}.")
        _fsync_file(tmp)
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    finally:
        for leftover in (tmp, tmp.with_suffix(".tmp")):   # mindspore writes <name>.tmp first
            if leftover.exists():
                leftover.unlink()
    return path


def write_text_atomic(path, text: str, encoding: str = "utf-8") -> Path:
    return atomic_write(path, lambda tmp: tmp.write_text(text, encoding=encoding))


def save_checkpoint_atomic(save_obj, path, **kwargs) -> Path:
    """``mindspore.save_checkpoint(save_obj, path, **kwargs)`` without the window in which
    neither the old nor the new checkpoint exists."""
    import mindspore as ms
    return atomic_write(path, lambda tmp: ms.save_checkpoint(save_obj, str(tmp), **kwargs))


def stale_temp_files(directory) -> list[Path]:
    """Temporaries left by a killed writer in ``directory`` (a successful write leaves none)."""
    return sorted(Path(directory).glob(f"{TMP_PREFIX}*"))
