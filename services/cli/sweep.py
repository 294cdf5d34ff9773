"""`gpuledger whatif LOG --sweep FILE [--workers N | --scheduler URL] [--rank KEYS]`: every
variant an independent task (replay/sweep), one progress bar, one report with the ranking and
every task that failed."""

from __future__ import annotations

import html
import json
import sys
from pathlib import Path

import typer

from gpuledger.services.cli.common import fail, fail_input
from gpuledger.services.cli.whatif_fidelity import observed_of, print_fidelity


def _progress():
    """One bar over the sweep's tasks with its ETA, on stderr when that is a terminal."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        disable=not sys.stderr.isatty(),
        transient=True,
    )


def _variants(specs, sweep: Path | None):
    from gpuledger.replay.sweep.spec import SweepError, VariantSpec, load

    variants = [VariantSpec(name, tuple(sets), tuple(files)) for name, sets, files in specs]
    if sweep is not None:
        try:
            variants += load(sweep)
        except SweepError as exc:
            fail_input(exc)
    labels = [v.label for v in variants]
    if not variants:
        fail("nothing to replay: give --sweep FILE, --policy FILE or --variant", 2)
    if len(set(labels)) != len(labels):
        twice = sorted({x for x in labels if labels.count(x) > 1})
        fail(f"two variants are labelled alike ({', '.join(twice)}): labels must be unique", 2)
    return variants


def _section(keys, references, ranked, result) -> str:
    """The sweep's HTML section: how it ran, the ranking, the failed tasks."""
    from gpuledger.replay.sweep import rank

    e = html.escape
    parts = [
        "<h2>Sweep</h2>",
        f"<p class=note>{len(result.results) + len(result.failed)} tasks on {e(result.executor)} "
        f"in {result.seconds:.1f}s; byte-identical decision logs have equal sha256 whichever "
        "executor ran them.</p>",
    ]
    if keys:
        header, rows = rank.table(keys, references, ranked)
        parts.append("<table><thead><tr>" + "".join(f"<th>{e(h)}</th>" for h in header))
        parts.append("</tr></thead><tbody>")
        for r in rows:
            parts.append("<tr>" + "".join(f"<td>{e(c)}</td>" for c in r) + "</tr>")
        parts.append("</tbody></table>")
    parts.append("<table><thead><tr><th>variant</th><th>sha256 of the replayed log</th>")
    parts.append("<th>events</th><th>seconds</th></tr></thead><tbody>")
    for r in result.results:
        parts.append(
            f"<tr><td>{e(r.label)}</td><td><code>{r.sha256}</code></td>"
            f"<td>{r.events}</td><td>{r.seconds:.2f}</td></tr>"
        )
    parts.append("</tbody></table>")
    if result.failed:
        parts.append("<h2>Failed tasks</h2><table><tbody>")
        for label, error in result.failed:
            parts.append(f"<tr><td>{e(label)}</td><td>{e(error)}</td></tr>")
        parts.append("</tbody></table>")
    return "\n".join(parts) + "\n"


def run_sweep_command(
    log: Path,
    entries: list,
    specs,
    sweep: Path | None,
    workers: int | None,
    scheduler: str | None,
    rank_text: str | None,
    out: Path,
    logs: Path | None,
    json_out: Path | None,
    title: str | None,
    describe: tuple,
) -> None:
    """The sweep of `log` (its `entries` read): the `--policy`/`--variant` `specs` and the
    sweep file's variants. `describe`: (the observation sidecar's name, the function that
    words the inputs' checkpoint assumption), as `whatif` words them."""
    from gpuledger.replay.overlay import OverlayError
    from gpuledger.replay.sweep.run import check
    from gpuledger.replay.whatif import external_inputs
    from gpuledger.replay.whatif_report import render

    if workers is not None and workers < 1:
        fail(f"--workers {workers}: give 1 or more", 2)
    variants = _variants(specs, sweep)
    keys = _rank_keys(rank_text)
    obs_name, assumption = describe
    inputs = external_inputs(entries)
    seen = observed_of(log, inputs.timeline)
    try:
        check(inputs, variants)
    except OverlayError as exc:
        fail_input(exc)
    result = _replayed(inputs, variants, workers, scheduler, keep_logs=logs is not None)
    by_label = {r.label: r for r in result.results}
    fid = _fidelity(seen, result.results)
    references, others, order = _standings(seen, by_label, result.results, keys)
    shown = _shown(seen, obs_name, by_label, order, logs)
    if shown:
        page = render(str(log), shown, len(entries), title, checkpoint=assumption(inputs))
        cut = page.rfind("</body>")
        out.write_text(page[:cut] + _section(keys, references, others, result) + page[cut:])
    if json_out is not None:
        doc = _json(result, references, order, keys, fid)
        json_out.write_text(json.dumps(doc, indent=2) + "\n")
    if fid is not None:
        print_fidelity(fid, "baseline fidelity: gpuledger (recorded config) against observed")
    _print(keys, references, others, result, out if shown else None)
    if result.failed:
        raise typer.Exit(1)


def _rank_keys(rank_text: str | None) -> list:
    """The `--rank` keys (none: no ranking); a bad one ends the command with its line."""
    from gpuledger.replay.sweep import rank

    if rank_text is None:
        return []
    try:
        return rank.parse(rank_text)
    except rank.RankError as exc:
        fail_input(exc)


def _standings(seen, by_label: dict, results: list, keys: list) -> tuple[list, list, list]:
    """The references (observed, recorded baseline) and the other variants' metrics, and the
    others' labels in `--rank` order (as run without keys)."""
    from gpuledger.replay.sweep import rank

    references = [] if seen is None else [("observed", seen.metrics)]
    if "recorded" in by_label:
        references.append(("recorded", by_label["recorded"].summary.metrics))
    others = [(r.label, r.summary.metrics) for r in results if r.label != "recorded"]
    order = rank.order(keys, others) if keys else [label for label, _ in others]
    return references, others, order


def _replayed(inputs, variants, workers: int | None, scheduler: str | None, keep_logs: bool):
    """Every variant replayed on the executor `--workers`/`--scheduler` choose, with a
    progress bar; an executor that cannot start ends the command (3: scheduler unreachable)."""
    from gpuledger.replay.sweep.executors import ExecutorError, executor_for
    from gpuledger.replay.sweep.run import run_sweep

    try:
        executor = executor_for(len(variants), workers, scheduler)
    except ExecutorError as exc:
        fail(str(exc), 3 if scheduler else 2)
    try:
        with _progress() as progress:
            bar = progress.add_task("replaying variants", total=len(variants))
            return run_sweep(
                inputs,
                variants,
                executor,
                keep_logs=keep_logs,
                on_done=lambda _: progress.advance(bar),
            )
    finally:
        executor.close()


def _shown(seen, obs_name: str, by_label: dict, order: list, logs: Path | None) -> list:
    """The report's variants: what was observed (with an observation file), the recorded
    baseline, then the others in rank order; each one's log written under `logs` if asked."""
    from gpuledger.replay.whatif_report import Variant

    if logs is not None:
        logs.mkdir(parents=True, exist_ok=True)
    shown = []
    if seen is not None:
        shown.append(Variant("observed", [f"what {obs_name} records"], seen))
    for label in [*(["recorded"] if "recorded" in by_label else []), *order]:
        r = by_label[label]
        path = None
        if logs is not None and r.log is not None:
            safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in label)
            path = logs / f"{safe}.jsonl"
            path.write_bytes(r.log)
        shown.append(Variant(label, r.changes, r.summary, None if path is None else str(path)))
    return shown


def _fidelity(seen, results):
    """With an observation file: every replayed summary's waits regrouped under the history's
    groups (tenant, partition, user), as `whatif` measures them, and the `recorded`
    baseline's gap to what happened (None without either)."""
    from gpuledger.replay.compare import regroup
    from gpuledger.replay.fidelity import fidelity

    if seen is None:
        return None
    for r in results:
        regroup(r.summary, seen.jobs.groups)
    recorded = next((r for r in results if r.label == "recorded"), None)
    return None if recorded is None else fidelity(seen, recorded.summary)


def _json(result, references, order, keys, fid) -> dict:
    return {
        "fidelity": None if fid is None else fid.as_dict(),
        "executor": result.executor,
        "workers": result.workers,
        "seconds": round(result.seconds, 3),
        "rank_by": [k.text for k in keys],
        "ranking": order,
        "references": {label: {"metrics": m} for label, m in references},
        "variants": {
            r.label: {
                "changes": r.changes,
                "sha256": r.sha256,
                "events": r.events,
                "seconds": round(r.seconds, 3),
                "metrics": r.summary.metrics,
            }
            for r in result.results
        },
        "failed": [{"label": label, "error": error} for label, error in result.failed],
    }


def _print(keys, references, others, result, out: Path | None) -> None:
    from rich.console import Console
    from rich.table import Table

    from gpuledger.replay.sweep import rank

    console = Console()
    digests = {r.label: r for r in result.results}
    header, rows = rank.table(keys, references, others)
    t = Table(
        title=f"sweep: {len(digests)} variants ({result.executor}) in {result.seconds:.1f}s",
        title_justify="left",
    )
    for h in [*header, "events", "sha256"]:
        t.add_column(h, justify="left" if h == "variant" else "right")
    for r in rows:
        d = digests.get(r[1])
        t.add_row(*r, *((str(d.events), d.sha256[:12]) if d else ("", "")))
    console.print(t)
    for label, error in result.failed:
        console.print(f"failed: {label}: {error}", markup=False)
    if out is not None:
        console.print(f"wrote {out}")
