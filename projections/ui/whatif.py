"""The What-if page's data: `compare`'s rows and plots of two logs from one folder (a
request names a file of that folder, never a path), cached by file size and time."""

from __future__ import annotations

import base64
import tempfile
import threading
from pathlib import Path
from typing import Any

LOG_SUFFIXES = (".jsonl", ".parquet", ".duckdb")
_cache: dict[tuple, dict[str, Any]] = {}
_lock = threading.Lock()


OBSERVED_SUFFIX = ".observed.jsonl"
"""An import's observation file (replay/observed.py) beside its log: not a log itself."""


def list_logs(directory: Path) -> list[str]:
    return sorted(
        p.name
        for p in directory.iterdir()
        if p.is_file()
        and p.suffix in LOG_SUFFIXES
        and not p.name.startswith(".")
        and not p.name.endswith(OBSERVED_SUFFIX)
    )


def resolve(directory: Path, name: str) -> Path:
    """The file `name` of `directory`; ValueError for anything else (a path, a missing file)."""
    if name not in list_logs(directory):
        raise ValueError(f"no log {name!r} in the what-if folder")
    return directory / name


def compare_logs(a: Path, b: Path) -> dict[str, Any]:
    """{"rows": compare's (metric, A, B, delta) rows, "plots": [(name, base64 PNG)]}."""
    from gpuledger.replay import compare as cmp

    key = tuple((str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in (a, b))
    with _lock:
        if key in _cache:
            return _cache[key]
        sa, sb = cmp.load(a), cmp.load(b)  # CompareError: unreadable log
        rows = cmp.rows(cmp.compare(sa, sb))
        result = {"rows": rows, "plots": plots(sa, sb, (a.name, b.name))}
        if len(_cache) > 8:
            _cache.clear()
        _cache[key] = result
        return result


def plots(sa, sb, labels: tuple[str, str]) -> list[tuple[str, str]]:
    """The comparison's charts as (name, base64 PNG); none on a server installed without the
    analysis extra (Matplotlib, NumPy), where the page shows the table alone."""
    try:
        from gpuledger.replay.plots import write_plots
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] not in ("matplotlib", "numpy"):
            raise
        return []
    with tempfile.TemporaryDirectory() as tmp:
        return [
            (p.stem, base64.b64encode(p.read_bytes()).decode())
            for p in write_plots(sa, sb, tmp, labels=labels)
        ]
