"""`gpuledger bench ...`: thin CLI over the benchmark harnesses in `replay/bench/`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from rich.console import Console

bench_app = typer.Typer(
    help="Benchmarks, each with --json: openb placement (FGD paper protocol), fleet-scale placement, live latency, replay, projector, restart and arrays (bounded work per tenant).",
    no_args_is_help=True,
)

POLICIES = ["bestfit", "packing", "fgd", "default"]


def _console() -> Console:
    from rich.console import Console

    return Console() if sys.stdout.isatty() else Console(width=160)


def parse_seeds(text: str) -> list[int]:
    """``42-51`` or ``42,43,50``."""
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if "-" in part:
            lo, hi = part.split("-", 1)
            out.extend(range(int(lo), int(hi) + 1))
        elif part:
            out.append(int(part))
    if not out:
        raise typer.BadParameter("no seeds")
    return out


def _policies(policy: str) -> list[str]:
    from gpuledger.services.placement import SCORERS

    names = POLICIES if policy == "all" else [p.strip() for p in policy.split(",")]
    for n in names:
        if n not in SCORERS:
            raise typer.BadParameter(
                f"unknown policy {n}; known: {', '.join(sorted(SCORERS))}, all"
            )
    return names


PodsOption = Annotated[
    Path | None,
    typer.Option("--pods", help="pod list CSV (default: TRACE/openb_pod_list_default.csv)"),
]
"""`--pods` of the openb benchmarks."""
NodesOption = Annotated[
    Path | None,
    typer.Option("--nodes", help="node list CSV (default: TRACE/openb_node_list_gpu_node.csv)"),
]
"""`--nodes` of the openb benchmarks."""


@bench_app.command()
def openb(
    folder: Annotated[
        Path | None,
        typer.Argument(
            metavar="[DIR]", help="trace folder (the same as --trace DIR)", show_default=False
        ),
    ] = None,
    pods: PodsOption = None,
    nodes: NodesOption = None,
    trace: Annotated[
        Path | None,
        typer.Option(
            "--trace",
            envvar="GPULEDGER_OPENB_DIR",
            help="folder holding the full openb CSV files (cluster-trace-gpu-v2023/csv)",
        ),
    ] = None,
    policy: Annotated[
        str, typer.Option("--policy", help="scorer name, comma list, or 'all'")
    ] = "default",
    seeds: Annotated[str, typer.Option("--seeds", help="e.g. 42-51 or 42,43")] = "42-51",
    inflate: Annotated[float, typer.Option("--inflate", help="requested GPU / capacity")] = 1.3,
    json_out: Annotated[
        Path | None, typer.Option("--json", help="write the report(s) as JSON")
    ] = None,
    workers: Annotated[
        int, typer.Option("--workers", help="processes running seeds in parallel")
    ] = 2,
    all_traces: Annotated[
        bool,
        typer.Option(
            "--all-traces",
            help="every openb_pod_list_*.csv in DIR (or --trace DIR), one table row each",
        ),
    ] = False,
    markdown: Annotated[
        Path | None,
        typer.Option(
            "--markdown",
            help="with --all-traces: write the table (markdown, with command, date and machine) here",
        ),
    ] = None,
) -> None:
    """Replay the openb trace under the FGD paper's protocol; unallocated GPU % at 100%.

    Needs the full trace (not shipped; tests/fixtures/openb has small slices): a missing
    file stops with one line saying where to get it, exit status 2. ``--all-traces DIR`` runs
    every pod list of DIR and prints (``--markdown``: writes) one table, e.g.
    ``--all-traces DIR --policy fgd,default --seeds 42-51 --markdown table.md``."""
    import msgspec
    from rich.table import Table

    from gpuledger.replay.openb.protocol import run
    from gpuledger.replay.openb.trace import TraceNotFound, load_nodes, load_tasks, trace_files

    if folder is not None:
        trace = folder
    if all_traces:
        _all_traces(trace, nodes, policy, seeds, inflate, json_out, workers, markdown)
        return
    try:
        pods, nodes = trace_files(trace, pods, nodes)
    except TraceNotFound as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    names = _policies(policy)
    seed_list = parse_seeds(seeds)
    node_list, tasks = load_nodes(nodes), load_tasks(pods)
    console = _console()
    chatty = sys.stdout.isatty() and json_out is None
    reports = []
    for name in names:

        def progress(r, name=name):
            if chatty:
                console.print(
                    f"[dim]{name} seed {r.seed}: {r.unallocated_at_100:.2f}% "
                    f"unallocated ({r.wall_s:.1f}s)[/dim]"
                )

        reports.append(
            run(node_list, tasks, name, seed_list, inflate, str(pods), progress, workers)
        )
    table = Table(
        title=f"openb: unallocated GPU % at 100% arrived ({len(seed_list)} seeds, "
        f"inflate {inflate}, {len(node_list)} nodes)"
    )
    for col in ("POLICY", "MEAN", "SD", "MEDIAN", "PLACEMENTS", "PLACEMENTS/S", "WALL S"):
        table.add_column(col, justify="left" if col == "POLICY" else "right")
    for r in reports:
        u = r.unallocated_at_100
        table.add_row(
            r.policy,
            f"{u['mean']:.2f}",
            f"{u['sd']:.2f}",
            f"{u['median']:.2f}",
            str(r.placements),
            f"{r.placements_per_s:,.0f}",
            f"{r.wall_s:.1f}",
        )
    console.print(table)
    if json_out is not None:
        from gpuledger.replay.bench.info import machine

        payload = msgspec.to_builtins(reports[0] if len(reports) == 1 else reports)
        for r in payload if isinstance(payload, list) else [payload]:
            r["machine"] = machine()
        json_out.write_bytes(msgspec.json.format(msgspec.json.encode(payload)) + b"\n")


def _all_traces(
    trace: Path | None,
    nodes: Path | None,
    policy: str,
    seeds: str,
    inflate: float,
    json_out: Path | None,
    workers: int,
    markdown: Path | None,
) -> None:
    import msgspec

    from gpuledger.replay.openb import table
    from gpuledger.replay.openb.protocol import run
    from gpuledger.replay.openb.trace import TraceNotFound, load_nodes, load_tasks, trace_files

    lists = table.pod_lists(trace) if trace is not None else []
    if trace is not None and trace.is_dir() and not lists:
        typer.echo(f"error: {trace}: no openb_pod_list_*.csv in this folder", err=True)
        raise typer.Exit(2)
    try:
        _, nodes = trace_files(trace, lists[0] if lists else None, nodes)
    except TraceNotFound as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    assert trace is not None  # trace_files needs it without --pods
    names = _policies(policy)
    seed_list = parse_seeds(seeds)
    node_list = load_nodes(nodes)
    rows = []
    for pods in lists:
        tasks = load_tasks(pods)
        reports = [
            run(node_list, tasks, name, seed_list, inflate, str(pods), None, workers)
            for name in names
        ]
        rows.append((pods.name, len(tasks), reports))
        if sys.stderr.isatty():
            typer.echo(
                f"{pods.name}: "
                + ", ".join(f"{r.policy} {r.unallocated_at_100['mean']:.2f}" for r in reports),
                err=True,
            )
    command = (
        f"gpuledger bench openb --all-traces {trace} --policy {policy} "
        f"--seeds {seeds} --inflate {inflate}"
    )
    text = table.markdown(rows, seed_list, inflate, command)
    typer.echo(text)
    if markdown is not None:
        markdown.write_text(text)
    if json_out is not None:
        payload = [{"pods_file": name, "tasks": n, "reports": reports} for name, n, reports in rows]
        json_out.write_bytes(msgspec.json.format(msgspec.json.encode(payload)) + b"\n")


@bench_app.command()
def fleet(
    policy: Annotated[
        str, typer.Option("--policy", help="scorer name, comma list, or 'all'")
    ] = "all",
    nodes: Annotated[
        int, typer.Option("--nodes", help="nodes (8-GPU H100, or the openb mix)")
    ] = 500,
    mix: Annotated[
        str,
        typer.Option("--mix", help="h100 (8 x H100 per node) or openb (openb node types repeated)"),
    ] = "h100",
    jobs: Annotated[
        int | None,
        typer.Option("--jobs", help="queued jobs, one decision each (default: 20 per node)"),
    ] = None,
    seed: Annotated[int, typer.Option("--seed")] = 7,
    json_out: Annotated[
        Path | None, typer.Option("--json", help="write the report as JSON")
    ] = None,
) -> None:
    """Fleet-scale speed: decisions/s and p99 per decision on NODES x 8 H100, or NODES of the
    openb node mix (``--mix openb``); job lifetimes scale with the fleet's GPUs, so every
    size runs at about the same occupancy."""
    import msgspec
    from rich.table import Table

    from gpuledger.replay.bench.fleet import run

    console = _console()
    chatty = sys.stdout.isatty() and json_out is None

    def progress(r):
        if chatty:
            console.print(f"[dim]{r.policy}: {r.decisions_per_s:,.0f} decisions/s[/dim]")

    if mix not in ("h100", "openb"):
        typer.echo(f"error: --mix {mix}: unknown node mix; known: h100, openb", err=True)
        raise typer.Exit(2)
    report = run(_policies(policy), nodes, jobs, seed, progress, mix)
    table = Table(
        title=f"fleet ({report.mix}): {report.nodes} nodes, {report.gpus} GPUs, "
        f"{report.jobs} jobs, peak RSS {report.max_rss_mib:,.0f} MiB"
    )
    for col in (
        "POLICY",
        "DECISIONS/S",
        "P50 MS",
        "P99 MS",
        "MAX MS",
        "CPU DEC/S",
        "CPU P99 MS",
        "PLACED",
        "GPU ALLOC %",
        "OCCUPANCY %",
        "FAILURES",
    ):
        table.add_column(col, justify="left" if col in ("POLICY", "FAILURES") else "right")
    for r in report.results:
        fails = ", ".join(f"{k} {v}" for k, v in r.reasons.items()) or "-"
        table.add_row(
            r.policy,
            f"{r.decisions_per_s:,.0f}",
            f"{r.p50_ms:.2f}",
            f"{r.p99_ms:.2f}",
            f"{r.max_ms:.1f}",
            f"{r.cpu_decisions_per_s:,.0f}",
            f"{r.cpu_p99_ms:.2f}",
            str(r.placed),
            f"{r.mean_gpu_allocated_pct:.1f}",
            f"{r.occupancy_pct:.1f}",
            fails,
        )
    console.print(table)
    if json_out is not None:
        from gpuledger.replay.bench.info import machine

        payload = msgspec.to_builtins(report)
        payload["machine"] = machine()
        json_out.write_bytes(msgspec.json.format(msgspec.json.encode(payload)) + b"\n")


if __name__ == "__main__":
    bench_app()


@bench_app.command("projector")
def projector_bench(
    events: int = typer.Option(
        200_000, "--events", help="Events for the sustained-rate measurement."
    ),
    rebuild: int = typer.Option(1_000_000, "--rebuild", help="Events for the rebuild measurement."),
    json_out: Path | None = typer.Option(None, "--json", help="Write the result here."),
    runs: int = typer.Option(
        1,
        "--runs",
        help="Runs (with --baseline: pairs, alternating); more than one: each in a fresh process, medians reported.",
    ),
    baseline: str | None = typer.Option(
        None,
        "--baseline",
        help="The Python of another checkout (its .venv/bin/python): the same bench alternately with its code, and the ratios.",
    ),
) -> None:
    """Projector speed: sustained events/s into DuckDB and the rebuild time of a large log
    (goals: >= 60,000 events/s sustained, 1 M rebuild <= 20 s, peak RSS <= 800 MB)."""
    import json
    import sys

    from gpuledger.replay.bench.info import baseline_run, paired
    from gpuledger.replay.bench.projector import run

    say = (lambda m: None) if json_out else (lambda m: typer.echo(m, err=True))
    args = ["--events", str(events), "--rebuild", str(rebuild)]
    if runs <= 1 and baseline is None:
        result = run(
            sustained_events=events,
            rebuild_events=rebuild,
            progress=None if json_out else (lambda m: typer.echo(m, err=True)),
        )
    else:
        # each run in a fresh process (peak RSS is per process), alternating with the baseline
        mine: list[dict] = []
        base: list[dict] = []
        try:
            for i in range(max(1, runs)):
                mine.append(baseline_run(sys.executable, "projector", args))
                say(
                    f"run {i + 1}: {mine[-1]['sustained_events_per_s']:,} events/s sustained, "
                    f"rebuild {mine[-1].get('rebuild_seconds')} s, peak {mine[-1]['peak_rss_mb']} MB"
                )
                if baseline is not None:
                    base.append(baseline_run(baseline, "projector", args))
                    say(
                        f"  baseline: {base[-1]['sustained_events_per_s']:,} events/s sustained, "
                        f"rebuild {base[-1].get('rebuild_seconds')} s, peak {base[-1]['peak_rss_mb']} MB"
                    )
        except RuntimeError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(1) from None
        keys = [
            k
            for k in (
                "sustained_events_per_s",
                "sustained_cpu_seconds",
                "sustained_peak_rss_mb",
                "rebuild_seconds",
                "rebuild_cpu_seconds",
                "peak_rss_mb",
            )
            if k in mine[-1]
        ]
        result = dict(mine[-1])
        result["runs"] = [{k: m.get(k) for k in keys} for m in mine]
        if baseline is not None:
            result["baseline"] = {
                "python": baseline,
                "runs": [{k: b.get(k) for k in keys} for b in base],
                **paired(mine, base, keys),
            }
        else:
            result.update(paired(mine, mine, keys))
    text = json.dumps(result, indent=2)
    if json_out is not None:
        json_out.write_text(text)
    typer.echo(text)


@bench_app.command("replay")
def replay_bench(
    pods: PodsOption = None,
    nodes: NodesOption = None,
    trace: Annotated[
        Path | None,
        typer.Option(
            "--trace", envvar="GPULEDGER_OPENB_DIR", help="folder holding the openb CSV files"
        ),
    ] = None,
    runs: Annotated[
        int, typer.Option("--runs", help="replays (each a fresh process); the median is reported")
    ] = 3,
    baseline: Annotated[
        str | None,
        typer.Option(
            "--baseline",
            help="the Python of another checkout (its .venv/bin/python): the same replay alternately with its code, and the ratio",
        ),
    ] = None,
    json_out: Annotated[
        Path | None, typer.Option("--json", help="write the result as JSON ('-' = stdout only)")
    ] = None,
    profile: Annotated[
        Path | None,
        typer.Option(
            "--profile", help="also replay once in this process under cProfile; stats to this file"
        ),
    ] = None,
) -> None:
    """Replay speed: events/s of a what-if replay of the openb trace (goal >= 50,000), with
    the sha256 of its output so that a changed decision shows."""
    import json

    from gpuledger.replay.bench.replay import profile_once, run
    from gpuledger.replay.openb.trace import TraceNotFound, trace_files

    try:
        pods, nodes = trace_files(trace, pods, nodes)
    except TraceNotFound as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    quiet = json_out is not None and str(json_out) == "-"
    say = (lambda m: None) if quiet else (lambda m: typer.echo(m, err=True))
    try:
        result = run(pods, nodes, runs=max(1, runs), baseline=baseline, progress=say)
    except RuntimeError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    if profile is not None:
        profile_once(pods, nodes, profile)
        result["profile"] = str(profile)
    text = json.dumps(result, indent=2)
    if json_out is not None and str(json_out) != "-":
        json_out.write_text(text + "\n")
    typer.echo(text)


@bench_app.command("arrays")
def arrays_bench(
    arrays: Annotated[int, typer.Option("--arrays", help="arrays the flooding tenant submits")] = 3,
    tasks: Annotated[
        int, typer.Option("--tasks", help="tasks per array (1 .. 100000; its limits lifted)")
    ] = 100_000,
    others: Annotated[
        int,
        typer.Option("--others", help="jobs of the other tenant (within its guarantee)"),
    ] = 20,
    borrow: Annotated[
        bool,
        typer.Option(
            "--borrow",
            help="the flooding tenant may borrow the other's idle guarantee (the other's jobs then reclaim it)",
        ),
    ] = False,
    json_out: Annotated[
        Path | None, typer.Option("--json", help="write the report as JSON")
    ] = None,
) -> None:
    """Bounded work per tenant: one tenant submits ARRAYS x TASKS tasks at once, another
    submits jobs within its guarantee; the other's submit -> placed (simulated and wall
    time), the fold's job records and the RSS, as ratios over the same timeline without
    the arrays (`idle`) and with arrays the cluster just holds (`small`), in one process."""
    import msgspec
    from rich.table import Table

    from gpuledger.replay.bench.arrays import run

    if not 1 <= tasks <= 100_000 or arrays < 1 or others < 1:
        typer.echo("error: --tasks 1 .. 100000, --arrays and --others at least 1", err=True)
        raise typer.Exit(2)
    console = _console()
    chatty = sys.stdout.isatty() and json_out is None

    def progress(r):
        if chatty:
            console.print(f"[dim]{r.label}: {r.wall_s:.1f} s, {r.events:,} events[/dim]")

    report = run(arrays, tasks, others, progress, borrow)
    table = Table(
        title=f"arrays: {arrays} x {tasks:,} tasks beside {others} jobs of another tenant;"
        f" peak RSS {report.peak_rss_mib:,.0f} MiB"
    )
    for col in (
        "RUN",
        "TASKS QUEUED",
        "OTHER P99 SIM S",
        "OTHER P99 WALL MS",
        "X IDLE (SIM, WALL)",
        "JOB RECORDS",
        "RSS MIB",
        "RUN S",
    ):
        table.add_column(col, justify="left" if col == "RUN" else "right")
    for r in report.runs:
        ratio = report.ratios[r.label]
        table.add_row(
            r.label,
            f"{r.tasks_queued:,}",
            f"{r.other_sim_p99_s:.1f}",
            f"{r.other_wall_p99_ms:.1f}",
            f"{ratio['other_sim_p99']:.2f}, {ratio['other_wall_p99']:.2f}",
            f"{r.max_job_records:,}",
            f"{r.rss_mib:,.0f}",
            f"{r.wall_s:.1f}",
        )
    console.print(table)
    if json_out is not None:
        from gpuledger.replay.bench.info import machine

        payload = msgspec.to_builtins(report)
        payload["machine"] = machine()
        json_out.write_bytes(msgspec.json.format(msgspec.json.encode(payload)) + b"\n")


@bench_app.command("restart")
def restart_bench(
    events: int = typer.Option(
        100_000, "--events", help="Events in the log (synthetic, realistic mix)."
    ),
    tail: int | None = typer.Option(
        None,
        "--tail",
        help="Events after the snapshot (default: min(events/10, 10000), the default snapshot interval).",
    ),
    json_out: Path | None = typer.Option(None, "--json", help="Write the result here."),
    full_refold: bool = typer.Option(
        True,
        "--full-refold/--no-full-refold",
        help="Also time a full refold of each service (the slow part at 1 M events).",
    ),
) -> None:
    """Each service's time to ready (connect + load snapshot + fold tail + first decide) after
    N events, with a snapshot and by a full refold, in the same run (goal: <= 3 s at 1 M)."""
    import json

    from gpuledger.replay.bench.restart import run_restart_bench

    result = run_restart_bench(
        events, tail, progress=lambda m: typer.echo(m, err=True), full_refold=full_refold
    )
    text = json.dumps(result, indent=2)
    if json_out is not None:
        json_out.write_text(text)
    typer.echo(text)


@bench_app.command("cli")
def cli_bench(
    runs: int = typer.Option(15, "--runs", min=1, help="Runs of each command (medians)."),
    db: Path | None = typer.Option(
        None, "--db", help="Projection for `jobs` (default: the demo scenario, projected first)."
    ),
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON only."),
    large_jobs: int = typer.Option(
        100_000,
        "--large-jobs",
        min=0,
        help="Also time `jobs` over a projection of this many jobs, read through a process "
        "that holds it as a projector does (0: skip; building it takes a minute or two).",
    ),
    large_db: Path | None = typer.Option(
        None, "--large-db", help="A large projection to use instead of building one."
    ),
) -> None:
    """Start-up of the command line, as a user meets it: the median wall time of `gpuledger
    --version` (goal: <= 150 ms), `gpuledger jobs` (goal: <= 300 ms) and `gpuledger jobs`
    over 100,000 jobs read through the projector (goal: <= 300 ms), each a fresh process,
    next to `python -c pass` measured in the same run. Exit 1 when a goal is missed."""
    import json

    from rich.table import Table

    from gpuledger.replay.bench.cli import measure

    if db is not None and not db.is_file():
        raise typer.BadParameter(f"{db}: no such projection", param_hint="--db")
    quiet = json_out or not sys.stderr.isatty()
    if large_db is not None and not large_db.is_file():
        raise typer.BadParameter(f"{large_db}: no such projection", param_hint="--large-db")
    result = measure(
        runs,
        db,
        progress=None if quiet else lambda m: typer.echo(m, err=True),
        large_jobs=large_jobs,
        large_db=large_db,
    )
    if json_out:
        typer.echo(json.dumps(result, indent=2))
    else:
        table = Table("COMMAND", "MEDIAN", "MIN", "OVER PYTHON", "GOAL", "OK")
        labels = {
            "python": "python -c pass",
            "version": "gpuledger --version",
            "jobs": "gpuledger jobs",
            "jobs_100k": "gpuledger jobs (100k jobs, via the projector)",
            "jobs_100k_direct": "gpuledger jobs (100k jobs, opening the file)",
        }
        for name, label in labels.items():
            if name not in result["median_s"]:
                continue
            goal = result["goal_s"].get(name)
            table.add_row(
                label,
                f"{result['median_s'][name] * 1000:.0f} ms",
                f"{result['min_s'][name] * 1000:.0f} ms",
                "-"
                if name not in result["over_python_s"]
                else f"{result['over_python_s'][name] * 1000:.0f} ms",
                "-" if goal is None else f"<= {goal * 1000:.0f} ms",
                "-" if goal is None else ("yes" if result["within_goal"][name] else "no"),
            )
        _console().print(table)
        load = result["machine"]["load_avg_1_5_15"]
        typer.echo(f"{result['runs']} runs each; load average {load}", err=True)
    if not all(result["within_goal"].values()):
        raise typer.Exit(1)


def _mount_latency() -> None:
    from gpuledger.replay.bench.latency import latency

    bench_app.command("latency")(latency)


_mount_latency()
