"""Synthetic sacct dumps for the Slurm importer's tests: times counted from `T0`, the docs'
columns plus one optional last column, and a writer that imports the dump."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from gpuledger.replay.importers.slurm import import_slurm

T0 = datetime(2024, 3, 1, 9, 0, tzinfo=UTC)
T0_MS = int(T0.timestamp() * 1000)
COLUMNS = (
    "JobID|JobIDRaw|JobName|User|Account|Partition|QOS|Priority|Submit|Eligible|Start|End|"
    "Elapsed|Timelimit|State|ExitCode|NNodes|NodeList|ReqTRES|AllocTRES"
)
ONE = "billing=1,cpu=4,gres/gpu=1,mem=16G,node=1"
SINFO = "g1|64|1000000|gpu:8\ng2|64|1000000|gpu:8\n"


def at(s: int | None) -> str:
    """`s` seconds after T0 as sacct writes it (None: `Unknown`)."""
    return "Unknown" if s is None else (T0 + timedelta(seconds=s)).strftime("%Y-%m-%dT%H:%M:%S")


def import_dump(d: Path, last_column: str, rows: list[str], **options) -> tuple[dict, Path]:
    """Write `rows` under the header (`COLUMNS|last_column`) and two 8-GPU nodes into `d`,
    import them; the summary and the log's path."""
    sacct, sinfo, out = d / "sacct.txt", d / "sinfo.txt", d / "slurm.jsonl"
    sacct.write_text("\n".join([f"{COLUMNS}|{last_column}", *rows]) + "\n")
    sinfo.write_text(SINFO)
    return import_slurm(sacct, out, sinfo=sinfo, **options).summary, out
