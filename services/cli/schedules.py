"""`gpuledger schedules`: what the time-of-day policies change next (NAME WHEN CHANGE)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import typer

from gpuledger.services.cli.common import fail, fail_input

app = typer.Typer()


def _parse_at(at: str | None) -> int:
    if at is None:
        return int(datetime.now(UTC).timestamp() * 1000)
    if at.lstrip("-").isdigit():
        return int(at)
    try:
        dt = datetime.fromisoformat(at.replace("Z", "+00:00"))
    except ValueError:
        fail(
            f"--at: cannot read {at!r}: use an ISO time (2026-06-01T08:00:00+02:00) or epoch ms", 2
        )
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return int(dt.timestamp() * 1000)


def _iso(ms: int, tz: str) -> str:
    from gpuledger.services.domain.policy.schedules import zone

    return datetime.fromtimestamp(ms / 1000, tz=zone(tz)).isoformat()


def upcoming(config, at_ms: int, count: int) -> list[dict]:
    """The next `count` fire times of every schedule after `at_ms`, soonest first, with the
    one that is in force (its last fire at or before `at_ms`)."""
    from gpuledger.services.domain.policy import schedules as sched

    rows = []
    for name in sorted(config.schedules):
        s = config.schedules[name]
        if s.removed:
            continue
        t = at_ms
        for _ in range(count):
            nxt = sched.next_fire_ms(s.cron, s.timezone, t)
            if nxt is None:
                break
            rows.append(
                {
                    "name": name,
                    "when": _iso(nxt, s.timezone),
                    "when_ms": nxt,
                    "cron": s.cron,
                    "timezone": s.timezone,
                    "change": sched.describe(s),
                    "last_fired_ms": config.fired.get(name),
                }
            )
            t = nxt
    rows.sort(key=lambda r: (r["when_ms"], r["name"]))
    return rows


def _live_config(nats_url: str | None, creds: Path | None):
    import asyncio

    from gpuledger.events import CONFIG_EVENTS
    from gpuledger.replay.export import stream_entries
    from gpuledger.services.cli.connect import cli_bus, resolve_access
    from gpuledger.services.domain.fold.config import ConfigState

    access = resolve_access(nats_url, creds)
    config = ConfigState()

    async def main() -> None:
        bus = await cli_bus(access, ensure=False)
        try:
            async for _, _, e in stream_entries(bus):
                if isinstance(e, CONFIG_EVENTS):
                    config.apply(e)
        finally:
            await bus.close()

    asyncio.run(main())
    return config


@app.command()
def schedules(
    config: Path | None = typer.Option(
        None,
        "--config",
        help="Cluster configuration file (default: the "
        "configuration folded from the live cluster's log).",
    ),
    at: str | None = typer.Option(
        None, "--at", help="From this instant (ISO time or epoch ms; default: now)."
    ),
    count: int = typer.Option(2, "--count", "-n", min=1, help="Fire times listed per schedule."),
    output: str = typer.Option("table", "-o", "--output", help="table, json or yaml."),
    nats_url: str | None = typer.Option(
        None, "--nats-url", envvar="GPULEDGER_NATS_URL", help="NATS server URL (without --config)."
    ),
    creds: Path | None = typer.Option(
        None,
        "--creds",
        envvar="GPULEDGER_CREDS",
        help="Credential file to read the log as (without --config).",
    ),
) -> None:
    """List what the time-of-day policies (`schedules:`) change next: NAME WHEN CHANGE."""
    from gpuledger.services.cli.output import _emit_structured, render_table
    from gpuledger.services.domain.fold.config import ConfigState
    from gpuledger.services.domain.inputs.configfile import ConfigFileError, config_events

    if output not in ("table", "json", "yaml"):
        fail(f"-o: {output!r} is not one of table, json, yaml", 2)
    at_ms = _parse_at(at)
    if config is not None:
        import yaml

        try:
            doc = yaml.safe_load(config.read_text())
        except OSError as exc:
            fail(f"{config}: cannot read: {exc.strerror}", 2)
        except yaml.YAMLError as exc:
            fail(" ".join(f"{config}: not YAML/JSON: {exc}".split()), 2)
        state = ConfigState()
        try:
            for e in config_events(doc or {}):
                state.apply(e)
        except ConfigFileError as exc:
            fail_input(exc, config)
    else:
        state = _live_config(nats_url, creds)
    rows = upcoming(state, at_ms, count)
    if output != "table":
        _emit_structured({"at_ms": at_ms, "schedules": rows}, output)
        return
    if not rows:
        typer.echo("no schedules")
        return
    typer.echo(
        render_table(
            ["name", "when", "change"], [[r["name"], r["when"], r["change"]] for r in rows]
        )
    )
