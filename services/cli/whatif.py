"""What-if commands: export the live log, verify recorded decisions, replay under a new policy."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import typer

from gpuledger.services.cli.common import fail, fail_input

# This module's commands; services/cli/main.py mounts them on the `gpuledger` app.
app = typer.Typer()


def _progress(enabled: bool):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        disable=not (enabled and sys.stderr.isatty()),
        transient=True,
    )


def _read(path: Path):
    from gpuledger.replay.export import read_any
    from gpuledger.replay.logio import LogFormatError

    if not path.exists():
        fail(f"{path}: no such log", 2)
    try:
        return list(read_any(path))
    except (LogFormatError, OSError, ValueError) as exc:
        fail(str(exc), 2)


def _parse_time(value: str | None) -> int | None:
    if value is None:
        return None
    if value.isdigit():
        return int(value)
    from datetime import datetime

    try:
        return int(datetime.fromisoformat(value).timestamp() * 1000)
    except ValueError:
        fail(f"cannot read time {value!r}: give epoch milliseconds or an ISO date/time", 2)


@app.command()
def export(
    dest: Path | None = typer.Argument(None, help="Where to write (the same as --out)."),
    out: Path | None = typer.Option(None, "--out", help="FILE.jsonl or FILE.parquet"),
    format_: str = typer.Option(
        "file",
        "--format",
        help="file (by --out's suffix) or parquet: a Hive-partitioned directory, appended to "
        "incrementally (docs/parquet.md).",
    ),
    from_log: Path | None = typer.Option(
        None, "--from", help="Export this log (any format) instead of the live stream."
    ),
    no_tables: bool = typer.Option(
        False, "--no-tables", help="parquet: leave out the projection's tables."
    ),
    nats_url: str | None = typer.Option(
        None,
        "--nats-url",
        envvar="GPULEDGER_NATS_URL",
        help="NATS server URL (default: the one `gpuledger up` runs here).",
    ),
    since: str | None = typer.Option(None, help="Only events at or after (epoch ms or ISO time)."),
    until: str | None = typer.Option(None, help="Only events at or before (epoch ms or ISO time)."),
    creds: Path | None = typer.Option(
        None,
        "--creds",
        envvar="GPULEDGER_CREDS",
        help="Credential file of the identity to read as (auditor or admin; default: the operator's of `gpuledger up` here).",
    ),
) -> None:
    """Export the live stream (or --from LOG) to a log file, or append it to a partitioned
    Parquet history (--format parquet DIR)."""
    import asyncio

    from gpuledger.replay.export import stream_entries, write_any

    out = out or dest
    if out is None or format_ not in ("file", "parquet"):
        fail("give where to write (--out FILE or DIR) and --format file or parquet", 2)
    if format_ == "parquet" or from_log is not None:
        from gpuledger.services.cli.history import export_history

        entries = None if from_log is None else _read(from_log)
        window = (_parse_time(since), _parse_time(until))
        export_history(out, format_, entries, nats_url, creds, window, not no_tables)
        return
    skipped: list[int] = []

    from gpuledger.services.cli.connect import cli_bus, resolve_access

    access = resolve_access(nats_url, creds)

    async def main() -> list:
        bus = await cli_bus(access, ensure=False)
        try:
            total = await bus.last_seq()
            rows = []
            with _progress(True) as progress:
                task = progress.add_task("exporting", total=total)
                async for entry in stream_entries(
                    bus,
                    _parse_time(since),
                    _parse_time(until),
                    on_skip=lambda seq, why: skipped.append(seq),
                ):
                    rows.append(entry)
                    progress.update(task, completed=entry[0])
            return rows
        finally:
            await bus.close()

    rows = asyncio.run(main())
    n = write_any(out, rows)
    note = f" ({len(skipped)} undecodable messages skipped: seq {skipped[:5]})" if skipped else ""
    typer.echo(f"exported {n} events to {out}{note}")


@app.command()
def verify(
    log: Path = typer.Argument(..., help="A log (JSONL or Parquet)."),
    json_out: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    check: bool = typer.Option(
        False,
        "--check",
        help=(
            "Checking mode: digest the state around every re-decision and re-run it without "
            "caches; stop with exit 1 at the first difference."
        ),
    ),
) -> None:
    """Refold LOG and re-decide every recorded decision from its recorded inputs.

    Exits 1 when any decision does not reproduce."""
    from gpuledger.replay.checking import DecideDrift
    from gpuledger.replay.verify import verify as run_verify

    started = time.perf_counter()
    entries = _read(log)
    try:
        report = run_verify(entries, check=check)
    except DecideDrift as exc:
        typer.echo(f"error: check: {exc}", err=True)
        raise typer.Exit(1) from None
    elapsed = time.perf_counter() - started
    if json_out:
        typer.echo(json.dumps({**report.as_dict(), "wall_s": round(elapsed, 3)}, indent=2))
    else:
        typer.echo(
            f"{report.events} events, {report.checked} decisions re-decided, "
            f"{len(report.mismatches)} mismatches ({elapsed:.2f}s)"
        )
        for m in report.mismatches[:20]:
            typer.echo(
                f"  seq {m.seq} {m.event_type}({m.correlation_id}) by {m.producer}: {m.explanation}"
            )
    raise typer.Exit(0 if report.ok else 1)


@app.command()
def replay(
    log: Path = typer.Argument(..., help="The recorded log (JSONL or Parquet)."),
    out: Path = typer.Option(..., "--out", help="The what-if log to write (JSONL or Parquet)."),
    config: Path | None = typer.Option(
        None,
        "--config",
        help="New configuration replacing the recorded one (tenants, classes, policy, optionally nodes).",
    ),
    policy: list[Path] = typer.Option(
        [],
        "--policy",
        help="Overlay FILE on the recorded configuration: its policy keys, tenants, classes (and nodes) replace only those (repeatable).",
    ),
    set_: list[str] = typer.Option(
        [],
        "--set",
        help="Overlay one key on the recorded configuration: policy.KEY=V, tenants.NAME.KEY=V, priority_classes.NAME.KEY=V (repeatable).",
    ),
    duckdb: Path | None = typer.Option(
        None, "--duckdb", help="Also project the what-if log into this DuckDB file."
    ),
    json_out: Path | None = typer.Option(
        None, "--json", help="Write the simulate-style JSON report here."
    ),
) -> None:
    """Re-run a log's external inputs through the deciders, under the recorded configuration,
    a replacement (--config) or overlays on the recorded one (--policy FILE, --set KEY=VALUE).
    When LOG has an observation file (an import's), print the replay's fidelity: its gap to
    what happened, per metric, against documented tolerances."""
    from gpuledger.replay.export import write_any
    from gpuledger.replay.metrics import pct_text
    from gpuledger.replay.report import report as build_report
    from gpuledger.replay.whatif import external_inputs, measured_replay, with_config
    from gpuledger.services.cli.common import read_doc
    from gpuledger.services.domain.inputs.configfile import ConfigFileError

    entries = _read(log)
    started = time.perf_counter()
    inputs = external_inputs(entries)
    if config is not None:
        doc = read_doc(config)
        if not doc.get("tenants"):
            typer.echo(
                f"warning: --config replaces the recorded configuration and {config} defines no "
                "tenants: every job will be rejected (UnknownTenant); to change only some keys, "
                f"use --policy {config} (an overlay on the recorded configuration)",
                err=True,
            )
        try:
            inputs = with_config(inputs, doc)
        except ConfigFileError as exc:
            fail_input(exc, config)
    inputs = overlaid(inputs, policy, set_)
    sim, meter = measured_replay(inputs)
    elapsed = time.perf_counter() - started
    write_any(out, sim.log)
    from gpuledger.replay.observed import copy_beside
    from gpuledger.services.cli.whatif_fidelity import replay_fidelity

    seen, replayed, fid = replay_fidelity(log, inputs.timeline, meter)
    data = build_report(sim.ledger, sim.log, sim.now_ms, measured=replayed.metrics)
    if seen is not None and fid is not None:
        data["observed"] = seen.metrics  # what the source recorded, same definitions
        data["fidelity"] = fid.as_dict()
        copy_beside(log, out)  # `compare` of replays finds it
    if json_out is not None:
        json_out.write_text(json.dumps(data, indent=2))
    if duckdb is not None:
        _project(out, duckdb)
    from gpuledger.replay.report import jobs_text

    m = data["metrics"]
    typer.echo(
        f"replayed {len(entries)} recorded events -> {len(sim.log)} events in {elapsed:.2f}s "
        f"({len(sim.log) / max(elapsed, 1e-9):,.0f} events/s); {jobs_text(data['jobs'])}; "
        f"allocation {pct_text(m['gpu_allocation_pct'])}, preemptions {m['preemptions']}, "
        f"lost {m['lost_gpu_hours']:.2f} GPU-h; wrote {out}"
    )
    if seen is not None:
        o = seen.metrics
        typer.echo(
            f"observed ({obs_name(log)}): jobs {o['jobs']}; allocation "
            f"{pct_text(o['gpu_allocation_pct'])}, {o['gpu_hours']:.1f} GPU-h, preemptions "
            f"{o['preemptions']}, lost {o['lost_gpu_hours']:.2f} GPU-h; replayed "
            f"{m['gpu_hours']:.1f} GPU-h"
        )
    if fid is not None:
        from gpuledger.services.cli.whatif_fidelity import print_fidelity

        title = "baseline fidelity: this replay against what happened"
        overlays = config is not None or policy or set_
        print_fidelity(fid, title + (" (with your configuration changes)" if overlays else ""))


@app.command()
def whatif(
    log: Path = typer.Argument(..., help="The recorded (or imported) log."),
    out: Path = typer.Option(..., "--out", help="The HTML report to write."),
    policy: list[Path] = typer.Option(
        [],
        "--policy",
        help="A variant: this file overlaid on the recorded configuration (repeatable).",
    ),
    variant: list[str] = typer.Option(
        [],
        "--variant",
        help="A variant of --set items: 'NAME: KEY=V; KEY=V' or 'KEY=V; ...' (repeatable).",
    ),
    no_baseline: bool = typer.Option(
        False, "--no-baseline", help="Leave out the replay under the recorded configuration."
    ),
    logs: Path | None = typer.Option(
        None, "--logs", help="Also write each variant's replayed log into this directory."
    ),
    json_out: Path | None = typer.Option(
        None,
        "--json",
        help="Also write every variant's metrics (the baseline's fidelity, the others' effects) as JSON here.",
    ),
    title: str | None = typer.Option(None, "--title", help="Report title."),
    sweep: Path | None = typer.Option(
        None, "--sweep", help="A sweep file: a list or grid of variants (docs/whatif.md, Sweeps)."
    ),
    workers: int | None = typer.Option(
        None, "--workers", help="Run the variants on a local Dask pool of N worker processes."
    ),
    scheduler: str | None = typer.Option(
        None, "--scheduler", help="Run the variants on the Dask cluster at tcp://HOST:PORT."
    ),
    rank: str | None = typer.Option(
        None,
        "--rank",
        help="Rank the variants: METRIC[:CLASS],... e.g. wait_p99:interactive,gpu_hours",
    ),
) -> None:
    """Replay LOG under the recorded configuration and under each --policy / --variant, and
    write one offline HTML report: the baseline's fidelity (its gap to what LOG's observation
    file records, per metric, against documented tolerances), comparison table (each
    variant's effect against the baseline and observed), queue wait by class, utilisation
    over time, preemptions and lost GPU-hours, per-tenant fairness. With --sweep, --workers,
    --scheduler or --rank, the variants run as a sweep (one task each; exit 1 if any failed)."""
    from gpuledger.replay.whatif import external_inputs
    from gpuledger.replay.whatif_report import Variant, render

    specs = _variant_specs(no_baseline, policy, variant)
    if sweep is not None or workers is not None or scheduler is not None or rank is not None:
        from gpuledger.services.cli.sweep import run_sweep_command

        args = (sweep, workers, scheduler, rank, out, logs, json_out, title)
        run_sweep_command(log, _read(log), specs, *args, (obs_name(log), assumption))
        return
    if not specs:
        fail("nothing to replay: give --policy FILE or --variant, or drop --no-baseline", 2)
    labels = [s[0] for s in specs]
    if len(set(labels)) != len(labels):
        fail(
            f"two variants are named alike ({', '.join(labels)}): name them with --variant 'NAME: ...'",
            2,
        )
    entries = _read(log)
    base_inputs = external_inputs(entries)
    variants = []
    from gpuledger.services.cli.whatif_fidelity import observed_of

    seen = observed_of(log, base_inputs.timeline)
    groups = None if seen is None else seen.jobs.groups
    if seen is not None:
        variants.append(Variant("observed", [f"what {obs_name(log)} records"], seen))
    if logs is not None:
        logs.mkdir(parents=True, exist_ok=True)
    for name, sets, files in specs:
        variants.append(_replayed(name, sets, files, base_inputs, groups, logs))
    out.write_text(
        render(str(log), variants, len(entries), title, checkpoint=assumption(base_inputs))
    )
    from gpuledger.services.cli.whatif_fidelity import print_whatif

    print_whatif(log, variants, json_out)
    typer.echo(f"wrote {out}")


def _variant_specs(
    no_baseline: bool, policy: list[Path], variant: list[str]
) -> list[tuple[str, list[str], list[tuple[str, object]]]]:
    """(name, --set items, overlay files) of each variant: the recorded baseline unless left
    out, each --policy file (named by its stem), each --variant ('NAME: K=V; ...' or
    'K=V; ...', then named `variant N`)."""
    from gpuledger.services.cli.common import read_doc

    specs: list[tuple[str, list[str], list[tuple[str, object]]]] = []
    if not no_baseline:
        specs.append(("recorded", [], []))
    for p in policy:
        specs.append((p.stem, [], [(str(p), read_doc(p))]))
    for i, text in enumerate(variant, 1):
        name, sep, rest = text.partition(":")
        if not sep or "=" in name:
            name, rest = f"variant {i}", text
        specs.append((name.strip(), [x.strip() for x in rest.split(";") if x.strip()], []))
    return specs


def _replayed(name: str, sets: list[str], files: list, base_inputs, groups, logs: Path | None):
    """One variant replayed and measured (its log written under `logs` if asked), with a
    progress line on stderr; a bad overlay ends the command (exit 2)."""
    from gpuledger.replay.compare import summary_of
    from gpuledger.replay.export import write_any
    from gpuledger.replay.metrics import measured
    from gpuledger.replay.overlay import OverlayError, apply_overlays
    from gpuledger.replay.whatif import measured_replay
    from gpuledger.replay.whatif_report import Variant

    try:
        inputs, changes = apply_overlays(base_inputs, sets, files)
    except OverlayError as exc:
        fail_input(exc)
    started = time.perf_counter()
    sim, meter = measured_replay(inputs)
    elapsed = time.perf_counter() - started
    path = None
    if logs is not None:
        safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in name)
        path = logs / f"{safe}.jsonl"
        write_any(path, sim.log)
    summary = summary_of(measured(meter, groups), name)
    m = summary.metrics
    typer.echo(
        f"{name}: {len(sim.log)} events in {elapsed:.2f}s; jobs {m['jobs']}; "
        f"preemptions {m['preemptions']}",
        err=True,
    )
    return Variant(name, changes, summary, None if path is None else str(path))


def obs_name(log: Path) -> str:
    from gpuledger.replay.observed import sidecar

    return sidecar(log).name


def assumption(inputs) -> str:
    """The checkpoint assumption of the replayed jobs, in words: `N jobs: none (...)`."""
    from gpuledger import events as ev
    from gpuledger.replay.importers.checkpoint import describe

    counts: dict[str, int] = {}
    for _, e in inputs.timeline:
        if isinstance(e, ev.JobSubmitted):
            text = describe(e.job.checkpoint)
            counts[text] = counts.get(text, 0) + 1
    return "; ".join(f"{n} jobs {text}" for text, n in sorted(counts.items())) or "no jobs"


def overlaid(inputs, policy_files: list[Path], sets: list[str]):
    """`inputs` with the `--policy` files and `--set` items applied (exit 2 on a bad one)."""
    if not policy_files and not sets:
        return inputs
    from gpuledger.replay.overlay import OverlayError, apply_overlays
    from gpuledger.services.cli.common import read_doc

    try:
        inputs, changes = apply_overlays(
            inputs, sets, [(str(p), read_doc(p)) for p in policy_files]
        )
    except OverlayError as exc:
        fail_input(exc)
    typer.echo(f"overlay on the recorded configuration: {'; '.join(changes)}", err=True)
    return inputs


def _project(log: Path, db: Path) -> None:
    try:
        from gpuledger.projections.store import rebuild
    except ImportError:
        fail("projections are not available in this build", 2)
    rebuild(log, db)


@app.command()
def calibrate(
    log: Path = typer.Argument(..., help="An imported log with its observation file."),
    knob: list[str] = typer.Option(
        [],
        "--knob",
        help="Fit only these knobs, or give a knob its own grid: NAME or NAME=V1,V2,... (repeatable).",
    ),
    split: float = typer.Option(
        0.5,
        "--split",
        help="Fraction of the jobs (by submit time) in the fitting window; the rest validate.",
    ),
    json_out: Path | None = typer.Option(None, "--json", help="Write the result as JSON here."),
) -> None:
    """Fit a few documented policy knobs (docs/whatif.md, "Calibration") to the observed waits
    of LOG's first window (by submit time) and validate on the second: the per-job wait error
    before and after on both. It fits timing knobs only and never closes a structural gap."""
    from gpuledger.services.cli.whatif_fidelity import calibrate_run

    calibrate_run(log, _read(log), knob, split, json_out)
