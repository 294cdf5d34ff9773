"""The projector as a process (`gpuledger run projector`) or as one of `gpuledger up`'s
supervised tasks: the single writer of the DuckDB projection, serving reads to the read
commands while it runs, with its heartbeat to `up`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any


def in_process_projector(url: str, db: Path, stop, options: Callable[[], dict[str, Any]]):
    """The projector as an asyncio task of `up` (services/runtime/cluster.py): its status,
    and the coroutine to supervise (a fresh one after a crash, connecting with `options()`)."""
    from gpuledger.projections.nats_source import ProjectorStatus, run_projector

    status = ProjectorStatus()

    def run():
        return run_projector(
            url, db, stop=stop, status=status, connect_options=options(), serve_reads=True
        )

    return status, run


def serve_projector(access, data: Path, collector=None) -> None:
    """The single-writer projector as a process: stops within a few seconds on SIGTERM /
    SIGINT in any state (connecting, catching up, NATS down), exit status 0. A projection it
    cannot open or write raises (ProjectionError, duckdb.Error): the caller reports it."""
    import asyncio

    from gpuledger.projections.nats_source import run_projector
    from gpuledger.services.runtime.logging import configure_logging
    from gpuledger.services.runtime.stopping import run_until_signalled

    configure_logging()
    data.mkdir(parents=True, exist_ok=True)

    from gpuledger.projections.nats_source import ProjectorStatus
    from gpuledger.services.runtime.supervisor import heartbeat_task

    status = ProjectorStatus()
    if collector is not None:
        collector.add_projector(status)

    def sample() -> dict[str, Any] | None:
        if not status.ready and status.state != "blocked":
            return None  # not ready: `up` waits for the first beat
        if status.auth_failure:
            return {
                "state": "unauthorized",
                "folded_seq": status.committed_seq,
                "detail": status.auth_failure,
            }
        return {"state": status.state, "folded_seq": status.committed_seq, "detail": status.detail}

    async def main(stop: asyncio.Event) -> None:
        beat = heartbeat_task(sample, 0.5)
        try:
            await run_projector(
                access.url,
                data / "projection.duckdb",
                stop=stop,
                status=status,
                connect_options=access.options(),
                serve_reads=True,
            )
        finally:
            if beat is not None:
                beat.cancel()

    run_until_signalled(main, name="projector")
