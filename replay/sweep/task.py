"""One sweep task: a variant replayed from the shared inputs, measured and digested.

`run_variant` is a pure function of (inputs, variant): the same pair gives the same decision
log, byte for byte, in any process, which is what lets any executor run it (and retry it).
What comes back is small (metrics, the series the report draws, the log's sha256); the log's
bytes only when asked for (`keep_log`).
"""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass
from typing import Any

from gpuledger.replay.sweep.spec import VariantSpec


@dataclass
class VariantResult:
    label: str
    changes: list[str]
    summary: Any
    """A `replay.compare.Summary` of the replayed log."""
    events: int
    sha256: str
    """Of the replayed log as `write_log` writes it."""
    seconds: float
    """Wall time of the replay and its measure, in the process that ran it."""
    worker: str
    log: bytes | None = None


def run_variant(inputs, variant: VariantSpec, keep_log: bool = False) -> VariantResult:
    """Overlay `variant` on `inputs` (a `replay.whatif.Inputs`), replay, measure, digest."""
    from gpuledger.replay.compare import summarize
    from gpuledger.replay.logio import encode_lines
    from gpuledger.replay.overlay import apply_overlays
    from gpuledger.replay.whatif import replay

    started = time.perf_counter()
    inputs, changes = apply_overlays(inputs, list(variant.sets), list(variant.policies))
    sim = replay(inputs)
    digest = hashlib.sha256()
    chunks = []
    for chunk in encode_lines(sim.log):
        digest.update(chunk)
        if keep_log:
            chunks.append(chunk)
    summary = summarize(sim.log, name=variant.label)
    return VariantResult(
        label=variant.label,
        changes=changes,
        summary=summary,
        events=len(sim.log),
        sha256=digest.hexdigest(),
        seconds=time.perf_counter() - started,
        worker=f"pid {os.getpid()}",
        log=b"".join(chunks) if keep_log else None,
    )
