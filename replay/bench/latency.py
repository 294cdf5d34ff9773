"""Live latency benchmark: submit -> GangPlaced at a steady rate, and the drain rate of a burst.

Every service runs as its own OS process (`gpuledger run ROLE`) on an embedded nats-server
(loopback, no fsync); one simulated node agent process registers `nodes` 8-GPU nodes (MPS
GPUs, so small shares fit many jobs) and heartbeats them every 5 s, as in `gpuledger up`.

Phase 1 (steady): one job per `1/rate` s for `duration_s`, each a 250m GPU share running
10 s (so capacity churns). Latency = time the bench process sees `GangPlaced` on the bus
minus the time it started publishing `JobSubmitted` (both on this process's monotonic
clock), i.e. admission + scheduling + every hop through JetStream.

Phase 2 (burst): `burst` jobs (250m shares, running until the end) published as fast as the
bench can; drain rate = burst placements per second between the first and the last burst
`GangPlaced`. Also reported: the end-to-end burst time and rate from the first submission
(`burst_end_to_end_per_s`, in `runs` and the ratios too). The drain alone can flatter a slow
pipeline: one that places its first burst job late places the backlog in one rush, so read it
beside the end-to-end rate, which includes the bench's own publishing of the burst.

Goals (issue 15, `GOALS`): p99 <= 20 ms at 100 jobs/s and a drain >= 2,000 placements/s with
500 nodes; the JSON says for each run, and for the medians of several, whether they were met
(`goals_met`).

`profile_dir`: run every service under cProfile and write `<role>.prof` there.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

import typer

# The CLI mounts `latency` when it starts: the event contract, job files and YAML are imported
# when the benchmark runs, not for `gpuledger --help` (tests/cli/test_startup.py).

TENANT = "bench"
SHARE = "250m"
STEADY_RUN_S = 10
GOALS = {"p99_ms": 20.0, "drain_per_s": 2_000.0}


def goals_met(figures: dict[str, Any]) -> dict[str, bool]:
    """Whether `figures` (one run's, or medians) meet each of `GOALS`: p99 at most, drain at
    least."""
    return {
        "p99_ms": figures["p99_ms"] <= GOALS["p99_ms"],
        "drain_per_s": figures["drain_per_s"] >= GOALS["drain_per_s"],
    }


def cluster_doc(nodes: int) -> dict[str, Any]:
    return {
        "cluster": {
            "nodes": [
                {
                    "name_prefix": "n",
                    "count": nodes,
                    "gpus": 8,
                    "model": "H100-80GB",
                    "cpu": 128,
                    "memory": "1Ti",
                    "sharing": "mps",
                }
            ]
        },
        "tenants": [{"name": TENANT, "guaranteed": nodes * 8}],
    }


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    k = (len(s) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def _job(job_id: str, duration_s: int | None):
    from gpuledger import events as ev
    from gpuledger.services.domain.inputs.jobfile import job_spec
    from gpuledger.services.domain.tooling.stamp import stamp

    doc: dict[str, Any] = {"id": job_id, "tenant": TENANT, "class": "train", "gpu": SHARE}
    if duration_s is not None:
        doc["duration"] = duration_s
    spec = job_spec(doc)
    return stamp(
        ev.JobSubmitted,
        key=job_id,
        producer="bench",
        now_ms=time.time_ns() // 1_000_000,
        correlation_id=job_id,
        job=spec,
    )


async def _bench(
    rate: float,
    duration_s: float,
    burst: int,
    nodes: int,
    work: Path,
    profile_dir: Path | None,
    progress,
) -> dict[str, Any]:
    import asyncio

    import yaml

    from gpuledger import events as ev
    from gpuledger.replay.live_player import publish_config
    from gpuledger.replay.scenario import from_document
    from gpuledger.services.roles import CONTROL_PLANE
    from gpuledger.services.runtime.bus import Bus
    from gpuledger.services.runtime.nats_server import EmbeddedNats
    from gpuledger.services.runtime.processes import ServiceProcesses

    doc = cluster_doc(nodes)
    config = work / "cluster.yaml"
    config.write_text(yaml.safe_dump(doc))
    with EmbeddedNats(work / "nats") as server:
        bus = await Bus.connect(server.url, name="gpuledger-bench", **server.client_options())
        await bus.ensure_stream()
        await publish_config(bus, from_document(doc))
        procs = ServiceProcesses(
            server.access(),
            config=config,
            log_dir=work,
            profile_dir=profile_dir,
            env={"GPULEDGER_LOG_LEVEL": "warning"},
        )
        for role in (*CONTROL_PLANE, "node-agent"):
            procs.start(role)
        placed_at: dict[str, float] = {}
        registered: set[str] = set()
        events_seen = 0
        follower = await bus.follower(0)

        async def watch() -> None:
            nonlocal events_seen
            while True:
                d = await follower.next(timeout=1.0)
                if d is None:
                    continue
                events_seen += 1
                if ".GangPlaced" in d.subject:
                    e = ev.decode(d.data)
                    placed_at.setdefault(e.job_id, time.perf_counter())
                elif ".NodeRegistered" in d.subject:
                    registered.add(ev.decode(d.data).node.name)

        watcher = asyncio.create_task(watch())
        try:
            t0 = time.monotonic()
            while len(registered) < nodes:
                if time.monotonic() - t0 > 120:
                    raise RuntimeError(f"only {len(registered)} of {nodes} nodes registered")
                await asyncio.sleep(0.1)
            await asyncio.sleep(1.0)  # let every service fold the registrations
            progress(f"{nodes} nodes registered in {time.monotonic() - t0:.1f}s")

            # ---- phase 1: steady rate
            submitted_at: dict[str, float] = {}
            n = int(rate * duration_s)
            start = time.perf_counter()
            for i in range(n):
                due = start + i / rate
                delay = due - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                job = _job(f"s{i}", STEADY_RUN_S)
                submitted_at[job.job.job_id] = time.perf_counter()
                await bus.create_once(job)
            achieved = n / max(1e-9, time.perf_counter() - start)
            deadline = time.perf_counter() + 30
            while any(j not in placed_at for j in submitted_at) and time.perf_counter() < deadline:
                await asyncio.sleep(0.1)
            lat = [(placed_at[j] - t) * 1000 for j, t in submitted_at.items() if j in placed_at]
            progress(
                f"steady: {len(lat)}/{n} placed, p50 {percentile(lat, 0.5):.1f} ms, "
                f"p99 {percentile(lat, 0.99):.1f} ms (goal <= {GOALS['p99_ms']:.0f} ms)"
            )

            # ---- phase 2: burst
            ids = [f"b{i}" for i in range(burst)]
            jobs = [_job(j, None) for j in ids]
            b0 = time.perf_counter()
            sem = asyncio.Semaphore(256)

            async def submit(job) -> None:
                async with sem:
                    await bus.create_once(job)

            await asyncio.gather(*(submit(j) for j in jobs))
            b_submitted = time.perf_counter()
            deadline = b_submitted + max(120.0, burst / 50)
            while time.perf_counter() < deadline:
                done = sum(1 for j in ids if j in placed_at)
                if done == burst:
                    break
                await asyncio.sleep(0.2)
            times = sorted(placed_at[j] for j in ids if j in placed_at)
            drain = (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 else 0.0
            progress(
                f"burst: {len(times)}/{burst} placed, drain {drain:.0f}/s "
                f"(goal >= {GOALS['drain_per_s']:,.0f}/s)"
            )
            return {
                "p50_ms": round(percentile(lat, 0.5), 2),
                "p90_ms": round(percentile(lat, 0.9), 2),
                "p99_ms": round(percentile(lat, 0.99), 2),
                "max_ms": round(max(lat, default=float("nan")), 2),
                "rate": rate,
                "achieved_rate": round(achieved, 1),
                "duration_s": duration_s,
                "submitted": n,
                "placed": len(lat),
                "burst": burst,
                "burst_placed": len(times),
                "drain_per_s": round(drain, 1),
                "burst_submit_s": round(b_submitted - b0, 2),
                "burst_end_to_end_s": round((times[-1] - b0) if times else float("nan"), 2),
                "burst_end_to_end_per_s": round(len(times) / (times[-1] - b0), 1) if times else 0.0,
                "nodes": nodes,
                "gpus": nodes * 8,
                "events_on_bus": events_seen,
                "goals": GOALS,
            }
        finally:
            watcher.cancel()
            timed_out = False
            try:
                await watcher
            except asyncio.CancelledError:  # the watcher's, or this run's own (its time bound)
                timed_out = asyncio.current_task().cancelling() > 0  # type: ignore[union-attr]  # always inside a task here
            try:
                await follower.close()
                await bus.close()
            finally:
                procs.stop(timeout_s=30)
            if timed_out:
                raise asyncio.CancelledError


def time_bound_s(duration_s: float, burst: int, profiled: bool) -> float:
    """The most one run may take: registration (120 s) + steady + its wait (30 s) + the burst's
    wait + stopping, doubled under cProfile; past it the run stops with an error instead of
    hanging."""
    bound = 120 + duration_s + 30 + max(120.0, burst / 50) + 60
    return bound * (2 if profiled else 1)


def run_latency_bench(
    rate: float = 100.0,
    duration_s: float = 30.0,
    burst: int = 10_000,
    nodes: int = 500,
    *,
    profile_dir: str | Path | None = None,
    progress=None,
    timeout_s: float | None = None,
) -> dict[str, Any]:
    """Run both phases on a fresh embedded NATS and every service as a process; returns
    `p50_ms`, `p99_ms`, `drain_per_s`, `submitted`, `placed` and more (see module doc).
    TimeoutError past `timeout_s` (default `time_bound_s`)."""
    import asyncio

    from gpuledger.replay.bench.info import machine

    prof = Path(profile_dir) if profile_dir is not None else None
    if prof is not None:
        prof.mkdir(parents=True, exist_ok=True)
    bound = (
        timeout_s if timeout_s is not None else time_bound_s(duration_s, burst, prof is not None)
    )
    with tempfile.TemporaryDirectory(prefix="gpuledger-bench-") as tmp:
        result = asyncio.run(
            asyncio.wait_for(
                _bench(
                    rate, duration_s, burst, nodes, Path(tmp), prof, progress or (lambda _msg: None)
                ),
                timeout=bound,
            )
        )
    result["goals_met"] = goals_met(result)
    result["machine"] = machine()
    return result


def latency(
    rate: float = typer.Option(100.0, "--rate", help="Steady submissions per second."),
    duration: float = typer.Option(30.0, "--duration", help="Seconds of steady submissions."),
    burst: int = typer.Option(10_000, "--burst", help="Jobs in the burst."),
    nodes: int = typer.Option(500, "--nodes", help="Simulated 8-GPU nodes."),
    json_out: Path | None = typer.Option(
        None, "--json", help="Write the result here ('-' = stdout)."
    ),
    profile: Path | None = typer.Option(
        None, "--profile", help="Run services under cProfile; write <role>.prof here."
    ),
    runs: int = typer.Option(1, "--runs", help="Runs (with --baseline: pairs, alternating)."),
    baseline: str | None = typer.Option(
        None,
        "--baseline",
        help="The Python of another checkout (its .venv/bin/python): the same bench alternately with its code, and the ratios.",
    ),
    timeout: float | None = typer.Option(
        None,
        "--timeout",
        help="Seconds one run may take (default: from the sizes, doubled under --profile); past it: exit 4.",
    ),
) -> None:
    """Submit -> GangPlaced p50/p99 at a steady rate and the drain rate of a burst, with every
    service as a separate process (goals: p99 <= 20 ms at 100 jobs/s, drain >= 2,000
    placements/s with 500 nodes)."""
    quiet = json_out is not None and str(json_out) == "-"
    say = (lambda m: None) if quiet else (lambda m: typer.echo(m, err=True))
    from gpuledger.replay.bench.info import baseline_run, median, paired

    mine: list[dict[str, Any]] = []
    base: list[dict[str, Any]] = []
    args = [
        "--rate",
        str(rate),
        "--duration",
        str(duration),
        "--burst",
        str(burst),
        "--nodes",
        str(nodes),
    ]
    try:
        for _ in range(max(1, runs)):
            mine.append(
                run_latency_bench(
                    rate,
                    duration,
                    burst,
                    nodes,
                    profile_dir=profile,
                    progress=say,
                    timeout_s=timeout,
                )
            )
            if baseline is not None:
                say("baseline run ...")
                base.append(baseline_run(baseline, "latency", args))
                say(f"baseline: p99 {base[-1]['p99_ms']} ms, drain {base[-1]['drain_per_s']}/s")
    except TimeoutError:
        typer.echo("error: the latency bench timed out (see --timeout)", err=True)
        raise typer.Exit(4) from None
    except RuntimeError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    result = dict(mine[-1])
    if len(mine) > 1 or baseline is not None:
        keys = ["p50_ms", "p90_ms", "p99_ms", "drain_per_s", "burst_end_to_end_per_s"]
        result["runs"] = [
            {k: m[k] for k in keys} | {"load_avg_1_5_15": m["machine"]["load_avg_1_5_15"]}
            for m in mine
        ]
        result["medians"] = {k: median([m[k] for m in mine]) for k in keys}
        result["goals_met"] = goals_met(result["medians"])
        if baseline is not None:
            result["baseline"] = {
                "python": baseline,
                "runs": [{k: b[k] for k in keys} for b in base],
                **paired(mine, base, keys),
            }
    text = json.dumps(result, indent=2)
    if json_out is None:
        typer.echo(text)
    elif str(json_out) == "-":
        typer.echo(text)
    else:
        json_out.write_text(text)
        say(text)
