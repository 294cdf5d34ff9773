"""Fidelity output of `replay`, `compare` and `whatif` on imported history, and the
`calibrate` command. Thin: the numbers are `replay.fidelity` and `replay.calibrate`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from gpuledger.services.cli.common import fail

CLI_GROUP_LIMIT = 12
"""A dimension (tenant, partition, user) with more groups than this prints only its rows
outside tolerance on a terminal; every row is in `--json` and the HTML report."""


def specs_of(timeline) -> list:
    """The submitted job specs of a timeline of external inputs (`whatif.Inputs.timeline`)."""
    from gpuledger import events as ev

    return [e.job for _, e in timeline if isinstance(e, ev.JobSubmitted)]


def specs_in(entries) -> list:
    """The submitted job specs of a log."""
    from gpuledger import events as ev

    return [e.job for _, _, e in entries if isinstance(e, ev.JobSubmitted)]


def observed_of(log: Path, timeline):
    """The observed column of `log` (None without an observation file); exit 2 on a bad one."""
    from gpuledger.replay.compare import CompareError, observed

    try:
        return observed(log, specs_of(timeline))
    except CompareError as exc:
        fail(str(exc), 2)


def replay_fidelity(log: Path, timeline, meter):
    """`replay`: (observed column or None, the replayed log's summary under the history's
    groups, its fidelity or None); `meter`: the replay's integrals (`measured_replay`)."""
    from gpuledger.replay.compare import summary_of
    from gpuledger.replay.fidelity import fidelity
    from gpuledger.replay.metrics import measured

    seen = observed_of(log, timeline)
    replayed = summary_of(measured(meter, groups=None if seen is None else seen.jobs.groups))
    return seen, replayed, None if seen is None else fidelity(seen, replayed)


def print_whatif(log: Path, variants, json_out: Path | None) -> None:
    """`whatif`: the JSON (`whatif_json`), then the fidelity table and the comparison table."""
    from rich.console import Console
    from rich.table import Table

    from gpuledger.replay.fidelity import trim_groups
    from gpuledger.replay.whatif_report import fidelity_of, table

    fid = fidelity_of(variants)
    if json_out is not None:
        json_out.write_text(json.dumps(whatif_json(variants, fid), indent=2) + "\n")
    if fid is not None:
        print_fidelity(fid, "baseline fidelity: gpuledger (recorded config) against observed")
    header, body = table(variants, fid)
    t = Table(title=f"what-if: {log}", title_justify="left")
    for i, h in enumerate(header):
        t.add_column(h, justify="left" if i == 0 else "right")
    for r in trim_groups(body, CLI_GROUP_LIMIT):
        t.add_row(*r)
    Console().print(t)
    print_legend(body)


def print_legend(body) -> None:
    """One line saying what `(< error)` means, when a table shows it."""
    from gpuledger.replay.fidelity import ERROR_MARK

    if any(ERROR_MARK in cell for row in body for cell in row):
        typer.echo(
            f"{ERROR_MARK.strip()}: an effect smaller than the baseline's own error on that "
            "metric (its gap to observed; for waits at least the per-job median wait error)"
        )


def print_fidelity(fid, title: str) -> None:
    """The fidelity table and its summary line, on stdout."""
    from rich.console import Console
    from rich.table import Table

    from gpuledger.replay.fidelity import FIDELITY_HEADER, summary_line, table_rows

    t = Table(title=title, title_justify="left")
    for i, h in enumerate(FIDELITY_HEADER):
        t.add_column(h.upper(), justify="left" if i in (0, 5) else "right")
    for r in table_rows(fid, limit=CLI_GROUP_LIMIT):
        t.add_row(*r)
    Console().print(t)
    typer.echo(summary_line(fid))


def compare_fidelity(sa, sb, seen):
    """`compare A B`: with an observed column, every column's waits under the history's groups
    and A's fidelity (A is the baseline). Returns (fidelity or None, common) where
    `common(x, y)` gives the completion rows' times over the jobs completed in every column."""
    from gpuledger.replay.compare import common_completion, regroup
    from gpuledger.replay.fidelity import fidelity

    columns = [sa, sb] if seen is None else [seen, sa, sb]
    fid = None
    if seen is not None:
        for s in (sa, sb):
            regroup(s, seen.jobs.groups)
        fid = fidelity(seen, sa)
    n, times = common_completion(columns)
    by_id = {id(s): t for s, t in zip(columns, times, strict=True)}

    def common(x, y):
        return (n, by_id[id(x)], by_id[id(y)])

    return fid, common


def effect_mark(fid, label: str, sa, sb) -> str:
    """` (< error)` when B - A on `label` is smaller than A's error there."""
    from gpuledger.replay.fidelity import ERROR_MARK, below_error, metric_values

    va, vb = metric_values(sa.metrics).get(label), metric_values(sb.metrics).get(label)
    if fid is None or va is None or vb is None or va[1] is None or vb[1] is None:
        return ""
    return ERROR_MARK if below_error(fid, label, vb[1] - va[1]) else ""


def whatif_json(variants, fid) -> dict[str, Any]:
    """`whatif --json`: per variant its changes and metrics; the baseline (`recorded`) also its
    `fidelity`, every other replayed variant its `effects` (against the baseline and observed)."""
    from gpuledger.replay.fidelity import effects
    from gpuledger.replay.whatif_report import roles

    seen, ref = roles(variants)
    out: dict[str, Any] = {}
    for v in variants:
        entry: dict[str, Any] = {"changes": v.changes, "metrics": v.summary.metrics}
        if v is ref and fid is not None:
            entry["fidelity"] = fid.as_dict()
        elif v is not ref and v is not seen and ref is not None:
            entry["effects"] = effects(
                v.summary.metrics,
                ref.summary.metrics,
                None if seen is None else seen.summary.metrics,
                fid,
            )
        out[v.label] = entry
    return out


def calibrate_run(
    log: Path, entries: list, knob: list[str], split: float, json_out: Path | None
) -> None:
    """`gpuledger calibrate` (services/cli/whatif.py parses its arguments and reads LOG)."""
    from gpuledger.replay.calibrate import CalibrationError, calibrate, parse_knobs
    from gpuledger.replay.whatif import external_inputs

    if not 0 < split < 1:
        fail(f"--split must be between 0 and 1, not {split}", 2)
    try:
        grid = parse_knobs(knob)
    except CalibrationError as exc:
        fail(str(exc), 2)
    inputs = external_inputs(entries)
    seen = observed_of(log, inputs.timeline)
    if seen is None:
        from gpuledger.replay.observed import sidecar

        fail(f"{log}: no observation file ({sidecar(log).name}): calibrate needs what happened", 2)
    try:
        result = calibrate(inputs, seen, grid, split)
    except CalibrationError as exc:
        fail(str(exc), 2)
    if json_out is not None:
        json_out.write_text(json.dumps(result.as_dict(), indent=2) + "\n")
    for line in result.lines():
        typer.echo(line)
