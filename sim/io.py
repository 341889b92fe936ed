"""Atomic file writes: write to a temporary file in the same folder, then rename over the target,
so a reader (or an interrupted run) never sees a half-written file."""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pandas as pd


def write_text_atomic(text: str, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)          # mkstemp makes 0600; results are ordinary files
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def write_csv_atomic(df: pd.DataFrame, path: str | Path) -> Path:
    return write_text_atomic(df.to_csv(index=False), path)


def write_json_atomic(obj, path: str | Path) -> Path:
    return write_text_atomic(json.dumps(obj, indent=1) + "\n", path)
