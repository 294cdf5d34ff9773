"""What-if I/O commands: `import alibaba-openb` (trace -> log) and `compare A B` (two logs).

Thin: argument handling and output only; the work is in `replay.importers` and
`replay.compare`. services/cli/main.py mounts `import_app` and `app` on the main app.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import typer

from gpuledger.services.cli.common import fail

import_app = typer.Typer(
    help="Import a trace or production history (openb, Slurm sacct, Kubernetes, any CSV) as a log of external inputs (replay it with `gpuledger replay`).",
    no_args_is_help=True,
)

# `compare`; services/cli/main.py mounts it and `import_app` (as `import`) on the `gpuledger` app.
app = typer.Typer()


@import_app.command("alibaba-openb")
def import_alibaba_openb(
    pods: Path = typer.Option(..., "--pods", help="Pod list CSV (openb_pod_list_*.csv)."),
    nodes: Path = typer.Option(..., "--nodes", help="Node list CSV (openb_node_list_*.csv)."),
    out: Path = typer.Option(..., "--out", help="Log to write (JSONL)."),
    default_duration: int | None = typer.Option(
        None,
        "--default-duration",
        help="Run time (s) of pods without time columns; default: until cancelled.",
    ),
    limit: int | None = typer.Option(None, "--limit", help="Import only the first N pods."),
    output: str = typer.Option("table", "-o", "--output", help="Summary format: table or json."),
) -> None:
    """Alibaba openb GPU trace (cluster-trace-gpu-v2023) -> JSONL log: configuration, nodes,
    submissions at creation_time, cancels of pods deleted before scheduling."""
    from gpuledger.replay.importers import TraceImportError, import_openb
    from gpuledger.replay.logio import write_log
    from gpuledger.replay.openb.trace import missing_message

    for path in (pods, nodes):
        if not path.is_file():
            fail(missing_message(path, "pass its files with --pods and --nodes"), 2)
    started = time.perf_counter()
    try:
        result = import_openb(pods, nodes, default_duration_s=default_duration, limit=limit)
    except TraceImportError as exc:
        fail(str(exc), 2)
    try:
        write_log(out, result.entries())
        observed_path = result.write_observed(out)
    except OSError as exc:
        fail(f"{out}: {exc}", 2)
    summary = {
        "out": str(out),
        **result.summary(),
        "observed": str(observed_path),
        "wall_s": round(time.perf_counter() - started, 3),
    }
    if output == "json":
        typer.echo(json.dumps(summary, indent=2))
        return
    classes = ", ".join(f"{k} {v}" for k, v in summary["by_class"].items())
    shapes = ", ".join(f"{k} {v}" for k, v in summary["by_shape"].items())
    typer.echo(
        f"wrote {summary['events']} events to {out} in {summary['wall_s']:.2f}s: "
        f"{summary['nodes']} nodes ({summary['gpus']} GPUs), {summary['jobs']} jobs "
        f"({classes}; {shapes}), {summary['cancels']} cancels"
    )


def _run_import(out: Path, output: str, skipped_out: Path | None, work) -> None:
    """Run one streaming importer with a progress bar (stderr, when a terminal) and print its
    summary; `work(progress, skips)` returns the summary dict."""
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn

    from gpuledger.replay.importers.common import SkipLog, TraceImportError

    if output not in ("table", "json"):
        fail(f"-o must be table or json, not {output!r}", 2)
    started = time.perf_counter()
    handle = None
    try:
        handle = open(skipped_out, "w") if skipped_out is not None else None
    except OSError as exc:
        fail(f"{skipped_out}: {exc.strerror}", 2)
    skips = SkipLog(out=handle)
    bar = Progress(
        TextColumn("importing"),
        BarColumn(),
        DownloadColumn(),
        TimeElapsedColumn(),
        disable=not sys.stderr.isatty(),
        transient=True,
    )
    try:
        with bar:
            task = bar.add_task("import", total=None)

            def progress(done: int, total: int) -> None:
                bar.update(task, completed=done, total=total or None)

            summary = work(progress, skips)
    except TraceImportError as exc:
        for line in str(exc).splitlines():
            typer.echo(f"error: {line}", err=True)
        raise typer.Exit(2) from None
    except OSError as exc:
        fail(f"{out}: {exc.strerror or exc}", 2)
    except (ValueError, TypeError, OverflowError, RecursionError, MemoryError) as exc:
        # what no importer foresaw is still one line, never a traceback
        fail(f"import: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}", 2)
    finally:
        if handle is not None:
            handle.close()
    summary = {"out": str(out), **summary, "wall_s": round(time.perf_counter() - started, 3)}
    for line in summary.get("warnings", ()):
        typer.echo(f"warning: {line}", err=True)
    if output == "json":
        typer.echo(json.dumps(summary, indent=2))
        return
    typer.echo(summary_text(summary))


def summary_text(s: dict) -> str:
    """The import summary for people: what was written, jobs and gangs, GPU-hours, skips."""
    classes = ", ".join(f"{k} {v}" for k, v in s["by_class"].items()) or "none"
    shapes = ", ".join(f"{k} {v}" for k, v in s["by_shape"].items()) or "none"
    lines = [
        f"wrote {s['events']} events to {s['out']} in {s['wall_s']:.2f}s: {s['nodes']} nodes ({s['gpus']} GPUs)",
        f"  jobs {s['jobs']} ({s['gangs']} gangs, {s['members']} members"
        + (
            f"; {s['array_tasks']} tasks in {s['arrays']} arrays, "
            f"{s['array_tasks_split']} imported on their own"
            if s.get("arrays") or s.get("array_tasks_split")
            else ""
        )
        + f"), {s['tenants']} tenants, "
        f"observed {s['gpu_hours']:,.1f} GPU-hours",
        f"  classes: {classes}",
        f"  shapes: {shapes}",
        f"  cancelled before start {s['cancelled_before_start']}, pending at the end {s['pending_at_end']}, "
        f"running at the end {s['running_at_end']}, requeued {s['requeued']}"
        + "".join(f", {k.replace('_', ' ')} {v}" for k, v in s.items() if k in EXTRA_COUNTS and v),
    ]
    return "\n".join(lines + _notes(s) + _skipped_lines(s))


def _notes(s: dict) -> list[str]:
    """The summary's lines of what only some imports have: final states, jobs that never
    ran, the checkpoint assumed, where the observed run and the site's policy went, what
    Slurm had drained or reserved at export."""
    lines = []
    if s.get("final_states"):
        lines.append(
            "  final states: " + ", ".join(f"{k} {v}" for k, v in s["final_states"].items())
        )
    if s.get("never_ran"):
        lines.append(
            "  never ran in reality: " + "; ".join(f"{v} {k}" for k, v in s["never_ran"].items())
        )
    if s.get("checkpoint"):
        lines.append(f"  checkpoint assumed: {s['checkpoint']}")
    if s.get("observed"):
        lines.append(f"  observed (what happened) in {s['observed']}")
    if "nodes_drained" in s or "maintenance_windows" in s:
        lines.append("  from Slurm at export: " + _controls(s))
    if s.get("site_policy"):
        lines.append(f"  the site's policy (slurm.conf, QOS, accounts) in {s['site_policy']}")
    return lines


def _skipped_lines(s: dict) -> list[str]:
    """How many rows were skipped, and per reason the first of them."""
    if not s["skipped_rows"]:
        return ["  skipped 0 rows"]
    lines = [f"  skipped {s['skipped_rows']} rows:"]
    for reason, d in s["skipped"].items():
        more = f" (+{d['rows'] - len(d['first'])} more)" if d["rows"] > len(d["first"]) else ""
        lines.append(f"    {d['rows']} x {reason}: {', '.join(d['first'])}{more}")
    return lines


def _controls(s: dict) -> str:
    """Node states and reservations imported (`--node-states`, `--reservations`)."""
    parts = []
    if "nodes_drained" in s:
        parts.append(f"nodes drained {s['nodes_drained']}, down {s['nodes_down']}")
    if "maintenance_windows" in s:
        parts.append(
            f"maintenance windows {s['maintenance_windows']}, held for a tenant {s['tenant_windows']}"
        )
    return "; ".join(parts)


EXTRA_COUNTS = (
    "cancelled_while_running",
    "eligible_later",
    "spread_limited",
    "steps_folded",
    "gangs_split",
    "preempted_events",
    "evicted_events",
    "workload_evictions",
    "node_selected",
    "partition_unmatched",
    "node_selector_unmatched",
    "node_affinity_ignored",
)


@import_app.command("slurm")
def import_slurm_cmd(
    sacct: Path = typer.Option(
        ...,
        "--sacct",
        help="`sacct --parsable2 --allusers --duplicates --format=...` output (see docs/whatif.md).",
    ),
    out: Path = typer.Option(..., "--out", help="Log to write (JSONL)."),
    sinfo: Path | None = typer.Option(
        None,
        "--sinfo",
        help="`sinfo --Node --noheader --format='%N|%c|%m|%G|%P'` output (%P: partitions, optional).",
    ),
    nodes: Path | None = typer.Option(
        None, "--nodes", help="A gpuledger configuration file whose cluster.nodes are the nodes."
    ),
    mapping: Path | None = typer.Option(
        None,
        "--mapping",
        help="YAML overriding QOS -> class and account -> tenant (see docs/whatif.md).",
    ),
    timezone: str = typer.Option(
        "UTC", "--timezone", help="Time zone of sacct's times (the cluster's local time)."
    ),
    columns: str | None = typer.Option(
        None,
        "--columns",
        help="The column names of a headerless dump (sacct --noheader), comma-separated, in its --format order.",
    ),
    skipped_out: Path | None = typer.Option(
        None, "--skipped", help="Also write every skipped row (FILE:LINE: reason) here."
    ),
    slurm_conf: Path | None = typer.Option(
        None, "--slurm-conf", help="The site's slurm.conf (partitions, priority, preemption)."
    ),
    qos: Path | None = typer.Option(None, "--qos", help="`sacctmgr show qos -P` output."),
    assoc: Path | None = typer.Option(None, "--assoc", help="`sacctmgr show assoc -P` output."),
    node_states: bool = typer.Option(
        False,
        "--node-states",
        help="Import sinfo's state column (%T, sixth): drained/down nodes cordoned from the"
        " trace's start (a snapshot at export: docs/importers.md).",
    ),
    reservations: Path | None = typer.Option(
        None,
        "--reservations",
        help="`scontrol show reservation` output: MAINT ones as maintenance windows, an"
        " account's as a window held for its tenant.",
    ),
    output: str = typer.Option("table", "-o", "--output", help="Summary format: table or json."),
) -> None:
    """Slurm accounting -> JSONL log: jobs (steps folded, arrays, het jobs, requeues,
    multi-node gangs), submissions, cancels of jobs cancelled while pending, nodes; with the
    site's files, its recorded policy (OUT.site.json, docs/importers.md)."""
    from gpuledger.replay.importers.slurm import import_slurm

    _run_import(
        out,
        output,
        skipped_out,
        lambda progress, skips: (
            import_slurm(
                sacct,
                out,
                sinfo=sinfo,
                nodes_file=nodes,
                mapping=mapping,
                timezone=timezone,
                progress=progress,
                skips=skips,
                columns=columns,
                slurm_conf=slurm_conf,
                qos=qos,
                assoc=assoc,
                node_states=node_states,
                reservations=reservations,
            ).summary
        ),
    )


@import_app.command("kubernetes")
def import_kubernetes_cmd(
    pods: Path = typer.Option(..., "--pods", help="`kubectl get pods -A -o json` output."),
    out: Path = typer.Option(..., "--out", help="Log to write (JSONL)."),
    events: Path | None = typer.Option(
        None, "--events", help="`kubectl get events -A -o json` output."
    ),
    nodes: Path | None = typer.Option(None, "--nodes", help="`kubectl get nodes -o json` output."),
    config_nodes: Path | None = typer.Option(
        None, "--config-nodes", help="Nodes from a gpuledger configuration file instead."
    ),
    workloads: Path | None = typer.Option(
        None,
        "--workloads",
        help="`kubectl get workloads.kueue.x-k8s.io -A -o json` output (Kueue).",
    ),
    mapping: Path | None = typer.Option(
        None,
        "--mapping",
        help="YAML overriding PriorityClass -> class and namespace/queue -> tenant.",
    ),
    namespaced_ids: bool = typer.Option(
        False,
        "--namespaced-ids",
        help="Job ids <namespace>~<name> (when names repeat across namespaces).",
    ),
    skipped_out: Path | None = typer.Option(
        None, "--skipped", help="Also write every skipped item (FILE:LINE: reason) here."
    ),
    output: str = typer.Option("table", "-o", "--output", help="Summary format: table or json."),
) -> None:
    """Kubernetes pods (+ events, nodes, Kueue workloads) -> JSONL log: GPU/MIG requests,
    indexed Job / JobSet / PodGroup gangs, priority classes, namespaces or queues as tenants."""
    from gpuledger.replay.importers.kubernetes import import_kubernetes

    _run_import(
        out,
        output,
        skipped_out,
        lambda progress, skips: (
            import_kubernetes(
                pods,
                out,
                events=events,
                nodes=nodes,
                nodes_file=config_nodes,
                workloads=workloads,
                mapping=mapping,
                namespaced_ids=namespaced_ids,
                progress=progress,
                skips=skips,
            ).summary
        ),
    )


@import_app.command("csv")
def import_csv_cmd(
    trace: Path = typer.Argument(..., help="The per-job CSV trace."),
    mapping: Path = typer.Option(
        ...,
        "--mapping",
        help="YAML naming the column of each field (see docs/whatif.md, examples/openb-mapping.yaml).",
    ),
    out: Path = typer.Option(..., "--out", help="Log to write (JSONL)."),
    nodes: Path | None = typer.Option(
        None, "--nodes", help="Node list CSV, read with the mapping's nodes: section."
    ),
    config_nodes: Path | None = typer.Option(
        None, "--config-nodes", help="Nodes from a gpuledger configuration file instead."
    ),
    skipped_out: Path | None = typer.Option(
        None, "--skipped", help="Also write every skipped row (FILE:LINE: reason) here."
    ),
    output: str = typer.Option("table", "-o", "--output", help="Summary format: table or json."),
) -> None:
    """Any per-job CSV trace -> JSONL log, through a strict mapping file."""
    from gpuledger.replay.importers.csvtrace import import_csv

    _run_import(
        out,
        output,
        skipped_out,
        lambda progress, skips: (
            import_csv(
                trace,
                out,
                mapping=mapping,
                nodes=nodes,
                nodes_file=config_nodes,
                progress=progress,
                skips=skips,
            ).summary
        ),
    )


@app.command("compare")
def compare_cmd(
    a: Path = typer.Argument(..., help="Baseline log (JSONL)."),
    b: Path = typer.Argument(..., help="What-if log (JSONL)."),
    json_out: Path | None = typer.Option(
        None, "--json", help="Write the comparison as JSON here ('-' = stdout)."
    ),
    plots: Path | None = typer.Option(
        None, "--plots", help="Write PNG charts into this directory."
    ),
    output: str = typer.Option("table", "-o", "--output", help="table or json (on stdout)."),
) -> None:
    """Side-by-side metrics of two logs: allocation and SM activity, wait p50/p99 per SLO
    class, preemptions and lost GPU-hours, fairness (Jain), completion times; DELTA = B - A.
    When A (else B) has an observation file (an import's OUT.observed.jsonl, copied beside a
    replay's --out), an OBSERVED column shows what the source recorded and A's fidelity (its
    gap to observed per metric, against documented tolerances) is printed first."""
    from gpuledger.replay.compare import CompareError, compare, load, observed, rows
    from gpuledger.replay.observed import find

    if output not in ("table", "json"):
        fail(f"-o must be table or json, not {output!r}", 2)
    try:
        sa, sb = load(a), load(b)
        seen, seen_of = observed(a), a
        if seen is None:
            seen, seen_of = observed(b), b
    except CompareError as exc:
        fail(str(exc), 2)
    from gpuledger.services.cli.whatif_fidelity import compare_fidelity

    result = compare(sa, sb)
    observed_col: dict[str, str] = {}
    fid, common = compare_fidelity(sa, sb, seen)
    if seen is not None:
        result["observed"] = {"log": str(find(seen_of)), "metrics": seen.metrics}
        result["fidelity"] = fid.as_dict()
        observed_col = {
            label: value for label, value, _, _ in rows(compare(seen, sa), common(seen, sa))
        }
    written: list[Path] = []
    if plots is not None:
        from gpuledger.replay.plots import write_plots

        written = write_plots(sa, sb, plots, labels=(f"A ({a.name})", f"B ({b.name})"))
        result["plots"] = [str(p) for p in written]
    if json_out is not None:
        text = json.dumps(result, indent=2)
        if str(json_out) == "-":
            sys.stdout.write(text + "\n")
        else:
            json_out.write_text(text + "\n")
    if output == "json":
        if str(json_out) != "-":
            sys.stdout.write(json.dumps(result, indent=2) + "\n")
        return
    if str(json_out) == "-":
        return
    from rich.console import Console
    from rich.table import Table

    from gpuledger.services.cli.whatif_fidelity import effect_mark, print_fidelity, print_legend

    table = Table(title=f"A = {a}   B = {b}", title_justify="left")
    table.add_column("METRIC")
    if observed_col:
        table.add_column("OBSERVED", justify="right")
    table.add_column("A", justify="right")
    table.add_column("B", justify="right")
    table.add_column("DELTA", justify="right")
    from gpuledger.replay.fidelity import trim_groups
    from gpuledger.services.cli.whatif_fidelity import CLI_GROUP_LIMIT

    body = [[*r[:3], r[3] + effect_mark(fid, r[0], sa, sb)] for r in rows(result, common(sa, sb))]
    for row in trim_groups(body, CLI_GROUP_LIMIT):
        if observed_col:
            row = (row[0], observed_col.get(row[0], ""), *row[1:])
        table.add_row(*row)
    console = Console()
    if fid is not None:
        print_fidelity(fid, f"baseline fidelity: A ({a.name}) against observed")
    console.print(table)
    print_legend(body)
    for p in written:
        console.print(f"wrote {p}")
