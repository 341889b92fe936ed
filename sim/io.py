"""Output files: atomic, never over a user's file, strict JSON.

* Atomic: every file is written to a temporary file in the same folder (``.NAME.XXXX.tmp``), then
  renamed over the target, so a reader (or an interrupted run) never sees a half-written file.
  Temporaries left by an interrupted run are removed when the same file is next written.
* Ours only: each folder we write into keeps a manifest, :data:`MANIFEST`, of the files we wrote
  there and the SHA-256 of what we wrote. An existing file is replaced only if the manifest lists
  it with its current content, so a user's file that happens to sit at an output path (a CSV of
  other columns, a plot, a file edited since) is refused with a message; :func:`overwriting`
  (the commands' ``--force``) replaces it anyway.
* One writer: :func:`sole_writer` claims a file for a long run that rewrites it again and again
  (a sweep's CSV), so a second run given the same file is refused instead of interleaving its
  rows with the first's and removing the first's temporaries.
* Strict JSON: :func:`json_text` gives RFC 8259 JSON: NaN and infinities become ``null``, numpy
  scalars and arrays plain numbers and lists.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import socket
import tempfile
from pathlib import Path

from .checks import InputError

MANIFEST = ".moe-pipesim-outputs.json"
_force = False


@contextlib.contextmanager
def overwriting(force: bool = True):
    """Within the block, replace existing files even if they are not ours (``--force``)."""
    global _force
    old, _force = _force, bool(force) or _force
    try:
        yield
    finally:
        _force = old


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _read_manifest(folder: Path) -> dict:
    try:
        files = json.loads((folder / MANIFEST).read_text()).get("files", {})
        return files if isinstance(files, dict) else {}
    except (OSError, ValueError, AttributeError):
        return {}


def check_output(path: str | Path) -> Path:
    """Refuse (:class:`InputError`) to write ``path`` when it is a folder, lies under a file, or is
    a file that is not ours (see the module doc), or its folder cannot be made; call it before a
    long run to fail early (it makes the folder, which the write would make anyway)."""
    path = Path(path)
    _claim(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot write {path}: its folder cannot be made ({exc.strerror or exc})") from None
    return path


def _claim(path: Path) -> None:
    if path.is_dir():
        raise InputError(f"{path} is a folder; give a file path")
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise InputError(f"cannot write {path}: {parent} is a file, not a folder")
            break
    if _force or not path.exists():
        return
    try:
        current = _digest(path.read_bytes())
    except OSError as exc:
        raise InputError(f"cannot replace {path}: {exc.strerror}") from None
    if _read_manifest(path.parent).get(path.name) != current:
        raise InputError(f"{path} exists and is not a file this simulator wrote (or it was changed since); "
                         "pass --force to replace it, or choose another path")


def _record(path: Path, data: bytes) -> None:
    """Add ``path`` and the digest of ``data`` to its folder's manifest (under a lock)."""
    folder = path.parent
    fd = os.open(folder, os.O_RDONLY)              # lock the folder itself: no lock file left behind
    try:
        with contextlib.suppress(ImportError, OSError):
            import fcntl
            fcntl.flock(fd, fcntl.LOCK_EX)
        files = _read_manifest(folder)
        files[path.name] = _digest(data)
        _replace(folder / MANIFEST, (json.dumps({"files": dict(sorted(files.items()))}, indent=1) + "\n").encode())
    finally:
        os.close(fd)                               # closing releases the lock


@contextlib.contextmanager
def sole_writer(path: str | Path):
    """Within the block this process is the only one writing ``path`` this way: a second process
    asking for it is refused (:class:`InputError`, naming the process that holds it) instead of
    both rewriting the file with their own rows. The claim is an advisory lock (``flock``) on
    ``.NAME.lock`` next to ``path``, taken without waiting, held while the block runs and released
    by the system when the process ends, however it ends: a run that crashed or was killed leaves at
    most the lock file, which blocks nothing. Where ``flock`` is missing (Windows) or the
    file system refuses it, there is no claim (as before)."""
    path = Path(path)
    lock = path.parent / f".{path.name}.lock"
    fd = _claim_lock(lock, path)
    if fd is None:                              # no claim possible here
        yield
        return
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"process {os.getpid()} on {socket.gethostname()}".encode())
        yield
    finally:
        with contextlib.suppress(OSError):
            os.unlink(lock)                     # before the lock goes: a waiter sees it gone
        os.close(fd)


def _claim_lock(lock: Path, path: Path) -> int | None:
    """A descriptor of ``lock`` holding its ``flock``, ``None`` where no lock can be taken, or
    :class:`InputError` when another process holds it."""
    try:
        import fcntl
    except ImportError:                         # pragma: no cover - not on POSIX
        return None
    while True:
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError:                         # a folder we cannot write: the write itself will say so
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 200).decode(errors="replace").strip()
            os.close(fd)
            raise InputError(f"{path} is being written by another run ({holder or 'a process'}); wait for it to "
                             "finish or give this one another output") from None
        except OSError:                         # no locks on this file system: no claim
            os.close(fd)
            return None
        try:                                    # still the file at that path? (a holder that just ended removed it)
            if os.stat(lock).st_ino == os.fstat(fd).st_ino:
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)


def remove_stale_temporaries(path: Path) -> None:
    """Remove ``.NAME.*.tmp`` files an interrupted write of ``path`` left behind."""
    for tmp in path.parent.glob(f".{path.name}.*.tmp"):
        with contextlib.suppress(OSError):
            tmp.unlink()


def _replace(path: Path, data: bytes, write=None) -> None:
    """Write ``data`` (or call ``write(tmp_path)``) into a temporary next to ``path``, then rename."""
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:                  # name the file asked for, not the temporary
        raise OSError(exc.errno, f"cannot write it ({exc.strerror})", str(path)) from None
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)          # mkstemp makes 0600; results are ordinary files
    try:
        with os.fdopen(fd, "wb") as fh:
            if write is None:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
        if write is not None:
            write(tmp)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_bytes_atomic(data: bytes, path: str | Path) -> Path:
    path = Path(path)
    _claim(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(path)
    _replace(path, data)
    _record(path, data)
    return path


def write_text_atomic(text: str, path: str | Path) -> Path:
    if not isinstance(text, str):
        raise TypeError(f"text must be str, got {type(text).__name__}")
    return write_bytes_atomic(text.encode(), path)


def write_csv_atomic(df, path: str | Path) -> Path:
    return write_text_atomic(df.to_csv(index=False), path)


def write_json_atomic(obj, path: str | Path) -> Path:
    return write_text_atomic(json_text(obj, indent=1) + "\n", path)


def write_figure_atomic(fig, path: str | Path, dpi: int = 110) -> Path:
    """``fig.savefig`` to ``path`` (format from its suffix, PNG without one), atomically, as ours."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    path = Path(path)
    fmt = path.suffix.lstrip(".").lower() or "png"
    if fmt not in FigureCanvasAgg(fig).get_supported_filetypes():
        raise InputError(f"{path}: cannot write a figure as .{fmt}; use .png, .pdf or .svg")
    _claim(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(path)
    _replace(path, b"", write=lambda tmp: fig.savefig(tmp, dpi=dpi, format=fmt))
    _record(path, path.read_bytes())
    return path


def shown(x: float) -> float:
    """``x`` for display, floating-point residue (``|x| < 1e-9``, e.g. ``1e-13`` of a fraction that
    is 0) as 0: a table prints ``0``, not ``8.4e-14``, and no "-0%"."""
    return 0.0 if abs(x) < 1e-9 else x


TRUE_TEXTS = ("True", "true", "1")      # a boolean as a CSV may hold it


def truthy(column):
    """A boolean column as a pandas mask, whether it holds booleans or was read back from a CSV as
    text (``True``, ``true``) or numbers (``1``)."""
    return column.astype(str).isin(TRUE_TEXTS)


def is_true(value) -> bool:
    """:func:`truthy` for one value (a sweep point's or a CSV row's cell)."""
    return str(value) in TRUE_TEXTS


def plain(obj):
    """``obj`` with NaN and infinities as ``None``, numpy scalars and arrays as Python numbers and
    lists, tuples as lists and mapping keys as text: what strict JSON can hold."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, (str, int, bool)) or obj is None:
        return obj
    if isinstance(obj, dict):
        return {str(k): plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [plain(v) for v in obj]
    if hasattr(obj, "tolist"):                      # numpy scalar or array
        return plain(obj.tolist())
    if hasattr(obj, "isoformat"):
        return obj.isoformat()
    return str(obj)


def json_text(obj, indent: int | None = None) -> str:
    """RFC 8259 JSON of ``obj`` (:func:`plain` first; never a bare NaN or Infinity)."""
    return json.dumps(plain(obj), indent=indent, allow_nan=False)


__all__ = ["MANIFEST", "check_output", "json_text", "overwriting", "plain", "remove_stale_temporaries", "shown",
           "sole_writer", "truthy", "write_bytes_atomic", "write_csv_atomic", "write_figure_atomic", "write_json_atomic", "write_text_atomic"]
