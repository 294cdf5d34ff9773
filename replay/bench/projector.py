"""Projector benchmark: sustained events/s into DuckDB and the rebuild time of a large log.

`synthetic_log(n)` generates a realistic job-lifecycle mix (submissions, admissions, pending
reasons, gang placements, member starts/exits, preemptions with checkpoint and requeue,
completions, failures, fair-share updates, heartbeats, GPU metrics) over a fleet of 8-GPU
nodes. `run(...)` measures:

- sustained: pre-decoded events folded and committed in batches of `live_batch` (what a live
  projector does under a backlog: group commits of 20k events, each written in the background
  while the next is folded), events/s;
- rebuild: a JSONL log of `rebuild_events` decoded and projected from scratch, seconds.
"""

from __future__ import annotations

import os
import random
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec

from gpuledger import events as ev
from gpuledger.events.subjects import role_of
from gpuledger.projections.store import Projector, rebuild
from gpuledger.replay.logio import write_log
from gpuledger.services.runtime.gctune import fewer_gc_passes


def synthetic_log(n: int, *, nodes: int = 64, seed: int = 7) -> Iterator[tuple[int, str, ev.Event]]:
    """Yield `n` messages `(seq, subject, event)` of a plausible cluster's life."""
    cluster = _SyntheticCluster(nodes, seed)
    out = [cluster.emit(e) for e in cluster.setup()]
    yield from out[:n]
    if cluster.seq >= n:
        return
    while True:
        for e in cluster.step():  # a step's events are made before any of them is numbered
            yield cluster.emit(e)
            if cluster.seq >= n:
                return


class _SyntheticCluster:
    """The state of `synthetic_log`'s cluster: one seeded random stream drawn in a fixed
    order (the log is a pure function of `n`, `nodes` and `seed`), the running gangs and each
    node's free GPU indices."""

    def __init__(self, nodes: int, seed: int) -> None:
        self.rnd = random.Random(seed)
        self.nodes = nodes
        self.seq = 0
        self.now = 0
        self.job = 0
        self.tenants = [f"org/t{i}" for i in range(8)]
        # job, alloc, members ((node, gpus) per rank), GPUs per member, attempt
        self.running: list[tuple[str, str, tuple[tuple[str, tuple[int, ...]], ...], int, int]] = []
        self.free = {f"node{i}": list(range(8)) for i in range(nodes)}  # free GPU indices

    def emit(self, e: ev.Event) -> tuple[int, str, ev.Event]:
        self.seq += 1
        role = role_of(type(e))  # produced by the role that produces its type, as live
        if role is not None and not e.producer:
            e = msgspec.structs.replace(e, producer=f"{role}/0")
        return self.seq, ev.subject_for(e), e

    def setup(self) -> list[ev.Event]:
        """Tenants, two priority classes and the nodes, at time 0."""
        out: list[ev.Event] = []
        now, nodes, tenants = self.now, self.nodes, self.tenants
        for t in tenants:
            out.append(
                ev.TenantConfigured(occurred_at_ms=now, tenant=t, guaranteed_gpu_milli=nodes * 1000)
            )
        for name, value, pre in (("train", 50, True), ("inference", 125, False)):
            out.append(
                ev.PriorityClassConfigured(
                    occurred_at_ms=now, name=name, value=value, preemptible=pre
                )
            )
        for i in range(nodes):
            info = ev.NodeInfo(
                name=f"node{i}",
                cpu_milli=128000,
                memory_mib=1 << 20,
                leaf_switch=f"leaf{i // 16}",
                gpus=tuple(
                    ev.GpuInfo(
                        index=g,
                        uuid=f"GPU-{i}-{g}",
                        model="H100-80GB",
                        memory_mib=81920,
                        clique=f"node{i}-nvl",
                    )
                    for g in range(8)
                ),
            )
            out.append(ev.NodeRegistered(occurred_at_ms=now, node=info, simulated=True))
        return out

    def step(self) -> list[ev.Event]:
        """The next moment's events: a submission (always when nothing runs), an ending,
        GPU metrics, a heartbeat or a fair-share update."""
        self.now += self.rnd.randint(50, 500)
        r = self.rnd.random()
        if r < 0.30 or not self.running:
            return self.submit()
        if r < 0.55:
            return self.end_one()
        if r < 0.75:
            return self.metrics()
        if r < 0.95:
            return [
                ev.NodeHeartbeat(
                    occurred_at_ms=self.now, node=f"node{self.rnd.randrange(self.nodes)}"
                )
            ]
        return self.fair_share()

    def place(self, replicas: int, gpus: int) -> tuple[tuple[str, tuple[int, ...]], ...] | None:
        """Free GPUs for every member (the services refuse a placement over busy GPUs)."""
        nodes, free = self.nodes, self.free
        start = self.rnd.randrange(nodes)
        taken: list[tuple[str, tuple[int, ...]]] = []
        for k in range(nodes):
            node = f"node{(start + k) % nodes}"
            while len(taken) < replicas and len(free[node]) >= gpus:
                got = tuple(free[node][:gpus])
                del free[node][:gpus]
                taken.append((node, got))
            if len(taken) == replicas:
                return tuple(taken)
        for node, got in taken:
            free[node] = sorted(free[node] + list(got))
        return None

    def release(self, members) -> None:
        for node, got in members:
            self.free[node] = sorted(self.free[node] + list(got))

    @staticmethod
    def placements(members) -> tuple[ev.MemberPlacement, ...]:
        return tuple(ev.MemberPlacement(rank=k, node=n, gpus=g) for k, (n, g) in enumerate(members))

    def finish(self, entry, at: int) -> list[ev.Event]:
        """Every member exits; the gang completes (or, 5 %, fails); its GPUs are free."""
        jid, alloc, members, _, _ = entry
        outcome = "failed" if self.rnd.random() < 0.05 else "completed"
        out: list[ev.Event] = [
            ev.MemberExited(
                occurred_at_ms=at, job_id=jid, allocation_id=alloc, rank=k, node=n, outcome=outcome
            )
            for k, (n, _) in enumerate(members)
        ]
        if outcome == "completed":
            out.append(ev.GangCompleted(occurred_at_ms=at, job_id=jid, allocation_id=alloc))
        else:
            out.append(
                ev.GangFailed(
                    occurred_at_ms=at, job_id=jid, allocation_id=alloc, reason="MemberFailed"
                )
            )
        self.release(members)
        return out

    def submit(self) -> list[ev.Event]:
        """A new job, admitted, maybe pending a moment, placed (finishing running gangs when
        the cluster is full)."""
        batch: list[ev.Event] = []
        self.job += 1
        jid = f"job{self.job}"
        tenant = self.tenants[self.job % len(self.tenants)]
        replicas = self.rnd.choice((1, 1, 1, 2, 4))
        gpus = self.rnd.choice((1, 2, 4, 8))
        spec = ev.JobSpec(
            job_id=jid,
            tenant=tenant,
            priority_class="train",
            replicas=replicas,
            resources=ev.Resources(gpus=gpus),
            duration_s=3600,
        )
        batch.append(ev.JobSubmitted(occurred_at_ms=self.now, event_id=f"s{jid}", job=spec))
        batch.append(
            ev.JobAdmitted(
                occurred_at_ms=self.now + 5,
                job_id=jid,
                tenant=tenant,
                priority_class="train",
                priority=50,
                preemptible=True,
                slo_class="batch",
                input_seq=self.seq,
            )
        )
        if self.rnd.random() < 0.5:
            batch.append(
                ev.PendingReasonChanged(
                    occurred_at_ms=self.now + 10,
                    job_id=jid,
                    reason="Resources",
                    message=f"needs {gpus} GPUs in one NVLink clique; largest free clique has 2",
                    details={
                        "queue_position": self.rnd.randint(1, 50),
                        "preemption_would_help": False,
                        "nodes": {"insufficient free GPUs": self.nodes},
                    },
                )
            )
        alloc = f"{jid}#1"
        members = self.place(replicas, gpus)
        while members is None and self.running:  # full: finish running work first
            batch.extend(
                self.finish(self.running.pop(self.rnd.randrange(len(self.running))), self.now + 15)
            )
            members = self.place(replicas, gpus)
        if members is not None:
            batch.append(
                ev.GangPlaced(
                    occurred_at_ms=self.now + 20,
                    job_id=jid,
                    allocation_id=alloc,
                    tenant=tenant,
                    borrowing=self.rnd.random() < 0.3,
                    input_seq=self.seq,
                    members=self.placements(members),
                )
            )
            batch.extend(
                ev.MemberStarted(
                    occurred_at_ms=self.now + 30, job_id=jid, allocation_id=alloc, rank=k, node=n
                )
                for k, (n, _) in enumerate(members)
            )
            self.running.append((jid, alloc, members, gpus, 1))
        return batch

    def end_one(self) -> list[ev.Event]:
        """A running gang ends: 15 % preempted (checkpointed, evicted, requeued, placed again),
        else finished."""
        batch: list[ev.Event] = []
        jid, alloc, members, gpus, attempt = self.running.pop(self.rnd.randrange(len(self.running)))
        if self.rnd.random() < 0.15:  # preempted, then placed again
            batch.append(
                ev.PreemptionRequested(
                    occurred_at_ms=self.now,
                    job_id=jid,
                    allocation_id=alloc,
                    beneficiary=f"job{self.job}",
                    reason="Priority",
                    deadline_ms=self.now + 30000,
                    input_seq=self.seq,
                    details={"alternatives": [{"victims": ["x"], "rejected": "MinRuntime"}]},
                )
            )
            batch.extend(
                ev.MemberCheckpointed(
                    occurred_at_ms=self.now + 1000,
                    job_id=jid,
                    allocation_id=alloc,
                    rank=k,
                    node=n,
                    step=attempt * 100,
                )
                for k, (n, _) in enumerate(members)
            )
            batch.extend(
                ev.MemberExited(
                    occurred_at_ms=self.now + 2000,
                    job_id=jid,
                    allocation_id=alloc,
                    rank=k,
                    node=n,
                    outcome="preempted",
                )
                for k, (n, _) in enumerate(members)
            )
            batch.append(
                ev.GangEvicted(
                    occurred_at_ms=self.now + 2000,
                    job_id=jid,
                    allocation_id=alloc,
                    reason="Priority",
                    preempted_by=f"job{self.job}",
                    checkpointed=True,
                    lost_gpu_ms=self.rnd.randint(0, 60000),
                )
            )
            self.release(members)
            batch.append(
                ev.GangRequeued(
                    occurred_at_ms=self.now + 2000, job_id=jid, after_allocation_id=alloc
                )
            )
            attempt += 1
            alloc = f"{jid}#{attempt}"
            members = self.place(len(members), gpus)
            if members is not None:
                batch.append(
                    ev.GangPlaced(
                        occurred_at_ms=self.now + 3000,
                        job_id=jid,
                        allocation_id=alloc,
                        tenant="",
                        input_seq=self.seq,
                        members=self.placements(members),
                    )
                )
                self.running.append((jid, alloc, members, gpus, attempt))
        else:
            batch.extend(self.finish((jid, alloc, members, gpus, attempt), self.now))
        return batch

    def metrics(self) -> list[ev.Event]:
        """One node's GPU samples."""
        batch: list[ev.Event] = []
        i = self.rnd.randrange(self.nodes)
        batch.append(
            ev.GpuMetricsReported(
                occurred_at_ms=self.now,
                node=f"node{i}",
                samples=tuple(
                    ev.GpuSample(
                        uuid=f"GPU-{i}-{g}",
                        sm_active=self.rnd.random(),
                        util_source="gpm",
                        memory_used_mib=40000,
                    )
                    for g in range(8)
                ),
            )
        )
        return batch

    def fair_share(self) -> list[ev.Event]:
        """Every tenant's share."""
        batch: list[ev.Event] = []
        batch.append(
            ev.FairShareUpdated(
                occurred_at_ms=self.now,
                input_seq=self.seq,
                shares=tuple(
                    ev.TenantShare(
                        tenant=t,
                        guaranteed_gpu_milli=self.nodes * 1000,
                        fair_share_gpu_milli=self.nodes * 1000,
                        allocated_gpu_milli=self.rnd.randint(0, self.nodes * 2000),
                        demand_gpu_milli=self.nodes * 2000,
                    )
                    for t in self.tenants
                ),
            )
        )
        return batch


def run(
    *,
    sustained_events: int = 200_000,
    rebuild_events: int = 1_000_000,
    live_batch: int = 20_000,
    workdir: str | Path | None = None,
    progress: Any = None,
) -> dict[str, Any]:
    """Measure the projector; returns a dict of numbers (also what `gpuledger bench
    projector` prints)."""
    result: dict[str, Any] = {"live_batch": live_batch}
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        tmpd = Path(tmp)
        if sustained_events:
            msgs = list(synthetic_log(sustained_events))
            t0, c0 = time.perf_counter(), time.process_time()
            # as `nats_source.run_projector` runs under a backlog: group commits of
            # `live_batch` events written in the background while the next ones are folded
            with (
                fewer_gc_passes(),
                Projector(tmpd / "sustained.duckdb", batch_size=live_batch, pipeline=True) as pj,
            ):
                pj.run(msgs)
            dt, cpu = time.perf_counter() - t0, time.process_time() - c0
            result.update(
                sustained_events=len(msgs),
                sustained_seconds=round(dt, 2),
                sustained_events_per_s=round(len(msgs) / dt),
                sustained_cpu_seconds=round(cpu, 2),
                sustained_peak_rss_mb=_peak_rss_mb(),
            )
            del msgs
        if rebuild_events:
            # the rebuild's own peak: reset the high-water mark left by the sustained phase
            # (its pre-decoded messages), where the platform allows
            reset = _reset_peak_rss()
            log = tmpd / "log.jsonl"
            t0 = time.perf_counter()
            write_log(log, synthetic_log(rebuild_events))
            result["log_write_seconds"] = round(time.perf_counter() - t0, 2)
            result["log_bytes"] = log.stat().st_size
            c0 = time.process_time()
            stats = rebuild(log, tmpd / "rebuild.duckdb", progress=progress)
            result["rebuild_cpu_seconds"] = round(time.process_time() - c0, 2)
            result.update(
                rebuild_events=stats["events"],
                rebuild_seconds=round(stats["seconds"], 2),
                rebuild_events_per_s=round(stats["events"] / stats["seconds"]),
            )
            if reset:
                result["rebuild_peak_rss_mb"] = _peak_rss_mb()
    # the whole process's peak (both phases): the larger of the two phases' peaks
    result["peak_rss_mb"] = max(_peak_rss_mb(), result.get("sustained_peak_rss_mb", 0.0))
    result["loadavg_1m"] = round(os.getloadavg()[0], 2)
    from gpuledger.replay.bench.info import machine

    result["machine"] = machine()
    return result


def _reset_peak_rss() -> bool:
    """Reset the process's peak resident set (Linux: `5` into /proc/self/clear_refs); False
    where that is not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _peak_rss_mb() -> float:
    """The process's peak resident set since start (or since `_reset_peak_rss`), MB."""
    import resource
    import sys

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / (1 << 20 if sys.platform == "darwin" else 1 << 10), 1)


def jobs_projection(path: str | Path, jobs: int = 100_000) -> dict[str, Any]:
    """Fold `synthetic_log` into `path` until it holds `jobs` jobs (`gpuledger bench cli`'s
    large projection); the rebuild's statistics."""

    def until_jobs() -> Iterator[tuple[int, str, ev.Event]]:
        n = 0
        for m in synthetic_log(10**9):
            if isinstance(m[2], ev.JobSubmitted):
                n += 1
                if n > jobs:
                    return
            yield m

    return rebuild(until_jobs(), path)


if __name__ == "__main__":
    # python -m gpuledger.replay.bench.projector [EVENTS]: the projector benchmark;
    # python -m gpuledger.replay.bench.projector jobs PATH N: a projection of N synthetic jobs
    import json
    import sys

    if sys.argv[1:2] == ["jobs"]:
        print(json.dumps(jobs_projection(sys.argv[2], int(sys.argv[3]))))
    else:
        n = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
        print(json.dumps(run(rebuild_events=n), indent=2))
