"""The dashboard's own projection, fed live from NATS as a reader (`gpuledger ui --nats-url`).

It never touches the production projector's durable consumer: it reads the stream through an
ordered (ephemeral) consumer, which the read-only `auditor` identity may create, folds every
message with the same `Projector` (exactly once, resuming at its file's `last_seq + 1`), and
commits and closes the file whenever the stream goes quiet (or every `batch` messages), so the
dashboard's readers can open it. It runs as its own process (one writer per file):
`python -m gpuledger.projections.ui.feed URL DB [--creds FILE]`."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from pathlib import Path

from gpuledger.projections.mappers import SequenceGap
from gpuledger.projections.store import ProjectionBusy, Projector

log = logging.getLogger("gpuledger.ui.feed")


async def feed(
    url: str,
    db_path: str | Path,
    *,
    connect_options: dict | None = None,
    batch: int = 5_000,
    quiet_s: float = 0.3,
    stop: asyncio.Event | None = None,
    on_commit=None,
) -> int:
    """Fold the stream into `db_path` until `stop` is set; returns the last committed seq."""
    from gpuledger.services.runtime.bus import Bus

    bus = await Bus.connect(url, name="gpuledger-ui-feed", **(connect_options or {}))
    pj = Projector(db_path)
    try:
        committed = pj.last_seq
        pj.release()
        follower = await bus.follower(committed)
        pending = 0

        async def commit() -> None:
            nonlocal pending, committed
            while True:
                try:
                    committed = pj.commit()
                    break
                except ProjectionBusy:  # a reader holds the file for a moment: retry
                    await asyncio.sleep(0.05)
            pj.release()
            pending = 0
            if on_commit is not None:
                on_commit(committed)

        try:
            while stop is None or not stop.is_set():
                d = await follower.next(timeout=quiet_s)
                if d is None:
                    if pending:
                        await commit()
                    continue
                if pj.apply_raw(d.seq, d.subject, d.data, received_ms=d.received_ms):
                    pending += 1
                if pending >= batch:
                    await commit()
            if pending:
                await commit()
        finally:
            await follower.close()
        return committed
    finally:
        pj.close()
        await bus.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="gpuledger-ui-feed")
    p.add_argument("url")
    p.add_argument("db")
    p.add_argument("--creds")
    a = p.parse_args(argv)
    from gpuledger.services.runtime.auth import client_options, tls_from_env

    logging.basicConfig(level=logging.WARNING, format="%(message)s")

    async def run() -> int:
        # ends with the dashboard that started it (uvicorn re-raises its stop signal, so the
        # parent may not get to terminate us)
        stop, parent = asyncio.Event(), os.getppid()

        async def watch_parent() -> None:
            while os.getppid() == parent:
                await asyncio.sleep(1.0)
            stop.set()

        watcher = asyncio.create_task(watch_parent())
        try:
            return await feed(
                a.url, a.db, connect_options=client_options(a.creds, tls_from_env()), stop=stop
            )
        finally:
            watcher.cancel()

    try:
        asyncio.run(run())
    except KeyboardInterrupt:
        return 0
    except SequenceGap as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3
    except OSError as exc:
        print(f"error: cannot reach NATS at {a.url}: {exc}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
