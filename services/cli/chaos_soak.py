"""The chaos soak (`gpuledger chaos`): a live, authenticated cluster under a steady mixed job
load while seeded random faults hit its processes; at the end, the whole system's invariants.

The cluster is what `gpuledger up --processes` runs (services/runtime/cluster.py `Cluster`
with its `ProcessSupervisor`: every service, each simulated node agent and the projector its
own OS process, restarted with back-off when it dies) on an embedded nats-server or a loopback
cluster of them (`--nats-cluster 3`). The faults and the load are services/runtime/chaos.py's. (This
module sits in the CLI layer because it drives the CLI's launcher and reads the log with
replay/ and projections/, which the runtime may not import.)

At the end the soak heals every fault, lets the cluster settle, stops it, reads the log and the
projection, and checks: `replay.invariants.check_log` (no lost job, no double allocation, no
partial gang, running members placed), the projection against a rebuild of the same log prefix
(`projection_equals_rebuild`), and `replay.verify` (`verify_zero_mismatches`).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gpuledger import events as ev
from gpuledger.services.runtime.chaos import (
    FLEET,
    Fault,
    FaultInjector,
    Load,
    plan_faults,
    sleep_or,
)


@dataclass
class SoakResult:
    seed: int
    duration_s: float
    nats_nodes: int
    faults: list[Fault] = field(default_factory=list)
    invariants: dict[str, bool] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)
    submitted: int = 0
    acked: int = 0
    events: int = 0
    activity: dict[str, int] = field(default_factory=dict)
    """Counts of what the cluster did (placements, preemptions, completions, member starts)."""
    restarts: dict[str, int] = field(default_factory=dict)
    """Per supervised process, how often the supervisor restarted it."""
    wall_s: float = 0.0

    @property
    def ok(self) -> bool:
        return bool(self.invariants) and all(self.invariants.values())

    @property
    def unplanned_restarts(self) -> dict[str, int]:
        """Per process, restarts the faults do not account for (it died on its own)."""
        planned: dict[str, int] = {}
        for f in self.faults:
            if f.outcome == "done" and f.kind in ("kill9", "restart") and f.target_kind != "nats":
                planned[f.target] = planned.get(f.target, 0) + 1
        return {n: r - planned.get(n, 0) for n, r in self.restarts.items() if r > planned.get(n, 0)}

    def as_dict(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "duration_s": self.duration_s,
            "nats_nodes": self.nats_nodes,
            "wall_s": round(self.wall_s, 1),
            "jobs": {"submitted": self.submitted, "acknowledged": self.acked},
            "events": self.events,
            "activity": dict(self.activity),
            "restarts": dict(self.restarts),
            "unplanned_restarts": self.unplanned_restarts,
            "faults": [asdict(f) for f in self.faults],
            "invariants": dict(self.invariants),
            "details": self.details,
            "ok": self.ok,
        }


class Soak:
    """One chaos run. `say` gets one line per fault and phase (the CLI prints them)."""

    def __init__(
        self,
        *,
        duration_s: float,
        seed: int,
        data: Path,
        nats_nodes: int = 1,
        fleet: Path = FLEET,
        say: Callable[[str], None] = lambda s: None,
        submit_every_s: float = 1.0,
        min_faults: int | None = None,
        settle_s: float = 45.0,
    ) -> None:
        self.duration_s, self.seed, self.data = duration_s, seed, Path(data).resolve()
        self.nats_nodes, self.fleet, self.say = nats_nodes, Path(fleet).resolve(), say
        self.submit_every_s, self.min_faults, self.settle_s = submit_every_s, min_faults, settle_s
        self.doc = yaml.safe_load(self.fleet.read_text())
        self.rng = random.Random(seed)
        self.result = SoakResult(seed, duration_s, nats_nodes)
        self.acked: dict[str, int] = {}
        self.settled_seq = 0
        """The stream's last sequence once the load stopped, when the projector and admission
        had folded it in time (0 if they had not)."""
        self.server: Any = None
        self.cluster: Any = None

    def _start_nats(self) -> Any:
        from gpuledger.services.runtime.embedded import embedded, embedded_cluster

        self.data.mkdir(parents=True, exist_ok=True)
        if self.nats_nodes > 1:
            return embedded_cluster(self.data, self.nats_nodes, doc=self.doc).start()
        return embedded(self.data, keep=True, doc=self.doc).start()

    async def _settle(self) -> None:
        """Wait (bounded) until every supervised process runs and the projector and admission
        have folded what the stream held once the load stopped."""
        from gpuledger.services.runtime.bus import Bus

        access = self.server.access("auditor")
        deadline = time.monotonic() + self.settle_s
        bus = await Bus.connect(access.url, name="chaos-settle", quiet=True, **access.options())
        try:
            target = None
            while time.monotonic() < deadline:
                with contextlib.suppress(Exception):
                    if target is None:
                        target = await asyncio.wait_for(bus.last_seq(), 5)
                board = self.cluster.board.services
                running = all(s.state == "running" for s in board.values())
                folded = [board[n].folded_seq or 0 for n in ("projector", "admission")]
                if target is not None and running and min(folded) >= target:
                    self.settled_seq = target
                    return
                await asyncio.sleep(0.5)
            self.say("settle: not every process caught up in time; checking anyway")
        finally:
            with contextlib.suppress(Exception):
                await bus.close()

    async def _read_log(self) -> list[tuple[int, str, ev.Event]]:
        from gpuledger.replay.export import stream_entries
        from gpuledger.services.runtime.bus import Bus

        access = self.server.access("admin")
        bus = await Bus.connect(
            access.url, name="chaos-read", connect_attempts=10, quiet=True, **access.options()
        )
        try:
            return [entry async for entry in stream_entries(bus)]
        finally:
            await bus.close()

    def _check(self, entries: list[tuple[int, str, ev.Event]]) -> None:
        from gpuledger.replay.invariants import check_log
        from gpuledger.replay.verify import verify

        r = self.result
        r.events = len(entries)
        counted = {
            "GangPlaced": "placements",
            "PreemptionRequested": "preemptions",
            "GangCompleted": "completions",
            "MemberStarted": "member_starts",
            "DeadLettered": "dead_letters",
        }
        r.activity = dict.fromkeys(counted.values(), 0)
        for _, _, e in entries:
            name = counted.get(type(e).__name__)
            if name is not None:
                r.activity[name] += 1
        for finding in check_log(entries, self.acked):
            r.invariants[finding.name] = finding.ok
            r.details[finding.name] = finding.as_dict()
        same, detail = projection_matches_rebuild(
            self.data / "projection.duckdb", entries, self.data / "rebuilt.duckdb"
        )
        r.invariants["projection_equals_rebuild"] = same
        # events published while the cluster stopped (members finishing) may come after the
        # projector's last commit; everything up to the end of the load must be in it
        r.details["projection_equals_rebuild"] = {**detail, "settled_seq": self.settled_seq}
        report = verify(entries)
        r.invariants["verify_zero_mismatches"] = report.ok
        r.details["verify_zero_mismatches"] = {
            "checked": report.checked,
            "mismatches": len(report.mismatches),
            "examples": [m.as_dict() for m in report.mismatches[:5]],
        }

    # ------------------------------------------------------------------ run

    async def _soak(self) -> None:
        """Start the cluster, run the load and the faults for the duration, heal, settle."""
        from gpuledger.services.cli.apply import publish_config
        from gpuledger.services.runtime.cluster import Cluster

        access = self.server.access("admin")
        self.say(f"starting the cluster: NATS at {access.url}, data in {self.data}")
        await publish_config(
            access, self.doc, replicas=self.nats_nodes if self.nats_nodes > 1 else None
        )
        self.cluster = Cluster(access, self.fleet, self.doc, True, data=self.data)
        await self.cluster.start()
        stop = asyncio.Event()
        injector = FaultInjector(
            self.cluster.supervisor, self.server, self.nats_nodes, self.rng, say=self.say
        )
        pool = injector.pool()
        plan = plan_faults(
            self.rng,
            self.duration_s,
            [t for t in pool if t[1] != "nats"],
            self.nats_nodes,
            self.min_faults,
        )
        self.say(
            f"cluster up: {len(pool) - self.nats_nodes} supervised processes, NATS nodes: "
            f"{self.nats_nodes}; load and {len(plan)} faults over {self.duration_s:g}s"
        )
        load = Load(access, self.seed, self.submit_every_s)
        load_task = asyncio.create_task(load.run(stop))
        faults = asyncio.create_task(injector.run(plan, stop))
        await sleep_or(stop, self.duration_s)
        stop.set()
        await faults
        await injector.heal()
        await load_task
        self.acked = load.acked
        self.result.faults = injector.done
        self.result.submitted, self.result.acked = load.submitted, len(load.acked)
        self.say(
            f"load stopped: {self.result.acked} of {self.result.submitted} submissions "
            f"acknowledged; settling"
        )
        await self._settle()

    async def run(self) -> SoakResult:
        started = time.monotonic()
        self.server = await asyncio.to_thread(self._start_nats)
        try:
            try:
                await self._soak()
            finally:
                if self.cluster is not None:
                    if self.cluster.board is not None:
                        self.result.restarts = {
                            n: s.restarts for n, s in self.cluster.board.services.items()
                        }
                    await self.cluster.close()
            entries = await self._read_log()
            await asyncio.to_thread(self._check, entries)
        finally:
            await asyncio.to_thread(self.server.stop)
        self.result.wall_s = time.monotonic() - started
        return self.result


def projection_matches_rebuild(
    live_db: Path, entries: list[tuple[int, str, ev.Event]], scratch_db: Path
) -> tuple[bool, dict[str, Any]]:
    """Every table of the live projection equals a projection rebuilt from the log prefix it
    says it applied (its `last_seq`)."""
    from gpuledger.projections.store import connect_readonly, rebuild

    if not live_db.exists():
        return False, {"error": f"no projection at {live_db}"}
    con = connect_readonly(live_db)
    try:
        live = dump_projection(con)
    finally:
        con.close()
    last = live["projector_meta"][0][0] if live["projector_meta"] else 0
    rebuild([e for e in entries if e[0] <= last], scratch_db)
    con = connect_readonly(scratch_db)
    try:
        again = dump_projection(con)
    finally:
        con.close()
    differ = sorted(t for t in live if live[t] != again.get(t))
    return not differ, {
        "last_seq": last,
        "log_last_seq": entries[-1][0] if entries else 0,
        "tables": len(live),
        "differing_tables": differ,
        "rows": sum(len(v) for v in live.values()),
    }


def dump_projection(con) -> dict[str, list[tuple]]:
    """Every projected table, in a canonical order, and the last applied sequence."""
    from gpuledger.projections.mappers import ALL_TABLES

    out = {t: con.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall() for t in ALL_TABLES}
    out["projector_meta"] = con.execute("SELECT last_seq FROM projector_meta").fetchall()
    return out


def run_soak(
    *,
    duration_s: float,
    seed: int,
    data: Path | None = None,
    nats_nodes: int = 1,
    say: Callable[[str], None] = lambda s: None,
    **kw: Any,
) -> SoakResult:
    """Run one soak (in a temporary data directory unless `data` is given)."""
    if data is not None:
        return asyncio.run(
            Soak(
                duration_s=duration_s, seed=seed, data=data, nats_nodes=nats_nodes, say=say, **kw
            ).run()
        )
    with tempfile.TemporaryDirectory(prefix="gpuledger-chaos-") as tmp:
        return asyncio.run(
            Soak(
                duration_s=duration_s,
                seed=seed,
                data=Path(tmp),
                nats_nodes=nats_nodes,
                say=say,
                **kw,
            ).run()
        )
