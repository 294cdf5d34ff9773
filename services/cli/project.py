"""`gpuledger project`: fold the log into the DuckDB projection (exactly once)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from gpuledger.services.cli.common import fail
from gpuledger.services.cli.reading import (
    DEFAULT_DATA,
    DataOption,
    DbOption,
    db_path,
)

# ---------------------------------------------------------------- project


def project_command(
    rebuild_: Annotated[
        bool, typer.Option("--rebuild", help="Drop the projection and rebuild it from the log.")
    ] = False,
    log: Annotated[
        Path | None, typer.Option("--log", help="JSONL log (seq, subject, event per line).")
    ] = None,
    nats_url: Annotated[
        str | None, typer.Option("--nats-url", help="Project live from JetStream.")
    ] = None,
    follow: Annotated[
        bool,
        typer.Option(
            "--follow/--no-follow",
            help="With --nats-url: keep consuming (default) or stop when caught up.",
        ),
    ] = True,
    db: DbOption = None,
    data: DataOption = DEFAULT_DATA,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print the result as JSON only.")
    ] = False,
    creds: Annotated[
        Path | None,
        typer.Option(
            "--creds",
            envvar="GPULEDGER_CREDS",
            help="With --nats-url: credential file (projector, auditor or admin).",
        ),
    ] = None,
) -> None:
    """Fold the log into the DuckDB projection (exactly once; resumes where it stopped)."""
    from gpuledger.projections.mappers import SequenceGap
    from gpuledger.projections.store import ProjectionError, catch_up, rebuild
    from gpuledger.replay.logio import LogFormatError

    path = db_path(db, data)
    if (log is None) == (nats_url is None):
        fail("give exactly one source: --log FILE.jsonl or --nats-url URL")
    try:
        if log is not None:
            if not log.exists():
                fail(f"no log file {log}")
            progress = None
            if not json_out and sys.stderr.isatty():

                def progress(n: int) -> None:
                    typer.echo(f"\r{n:,} events", err=True, nl=False)

            if rebuild_:
                stats = rebuild(log, path, progress=progress)
            else:
                stats = catch_up(log, path)
        else:
            import asyncio

            from gpuledger.projections.nats_source import run_projector

            if rebuild_:
                for p in (path, path.with_name(path.name + ".wal")):
                    if p.exists():
                        p.unlink()
            import nats.errors

            # --no-follow is one-shot: a few connection attempts, then a clear error.
            from gpuledger.services.cli.connect import resolve_access

            access = resolve_access(nats_url, creds, data)
            once = {} if follow else {"connect_attempts": 3, "connect_timeout": 2, "quiet": True}
            try:
                last = asyncio.run(
                    run_projector(
                        access.url,
                        path,
                        follow=follow,
                        connect_options={**once, **access.options()},
                        serve_reads=follow,
                    )
                )
            except KeyboardInterrupt:
                last = None
            except (OSError, nats.errors.Error) as exc:
                fail(f"cannot reach NATS at {nats_url}: {exc!r}", code=3)
            stats = {"last_seq": last}
    except SequenceGap as exc:
        fail(str(exc), code=3)
    except (ProjectionError, LogFormatError) as exc:
        fail(str(exc))
    stats["db"] = str(path)
    if json_out:
        typer.echo(json.dumps(stats))
    else:
        typer.echo(
            ", ".join(
                f"{k}={v if not isinstance(v, float) else round(v, 2)}" for k, v in stats.items()
            )
        )
