"""The chaos soak's moving parts (`gpuledger chaos`, services/cli/chaos_soak.py runs them):
the seeded fault schedule, the fault injector that acts on the processes a `ProcessSupervisor`
started and on embedded NATS nodes, and the steady mixed job load.

Faults (one `Fault` each, in the report's `faults`):
- `kill9`: SIGKILL a service, node agent or the projector (the supervisor restarts it), or a
  NATS node (restarted on its store after `hold_s`);
- `restart`: SIGTERM a process (it stops cleanly; the supervisor starts it again);
- `pause`: SIGSTOP a process (a NATS node too) for `hold_s`, then SIGCONT.
At most one NATS node is down or paused at a time (a 3-node cluster keeps its quorum; a single
node is a full outage the clients ride out). Nothing here starts a service: the supervisor
that `gpuledger up --processes` uses brings back what a fault stopped.

The load (`job_doc`, `Load`): gangs of whole GPUs, single GPUs, MIG instances and fractional
shares, from two tenants, in a low (`batch`) and a high (`prod`) priority class, so production
work preempts batch work. Submissions go through each tenant's CI identity; one counts as
accepted once JetStream acknowledged it (a retry reuses the event id, so it deduplicates).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
FLEET = ROOT / "replay" / "scenarios" / "chaos.yaml"
"""The fleet the soak runs: whole-GPU nodes for gangs, a MIG GPU and an MPS GPU."""
TENANTS = ("research", "product")

FAULT_KINDS = ("kill9", "restart", "pause")
MIN_FAULTS_PER_MINUTE = 12
WARMUP_S = 4.0
COOLDOWN_S = 8.0


# ---------------------------------------------------------------------- load


def job_doc(rng: random.Random, index: int, prefix: str) -> dict[str, Any]:
    """One job of the mixed load, as a job document (`gpuledger submit` accepts it)."""
    tenant = TENANTS[index % 2]
    kind = rng.choices(("gang", "single", "mig", "share", "prod"), weights=(3, 2, 2, 2, 2))[0]
    doc: dict[str, Any] = {
        "id": f"{prefix}-{index:05d}",
        "tenant": tenant,
        "class": "batch",
        "duration": f"{rng.randint(3, 9)}s",
        "checkpoint": {"save": "1s"},
    }
    if kind == "gang":
        doc.update(replicas=2, gpus=rng.choice((1, 2)))
    elif kind == "single":
        doc.update(gpus=1)
    elif kind == "mig":
        doc.update(mig=rng.choice(("1g.10gb", "2g.20gb", "3g.40gb")))
    elif kind == "share":
        doc.update(gpu=rng.choice(("250m", "500m")))
    else:  # production work: a gang that needs most of the whole-GPU nodes
        doc.update(
            {
                "class": "prod",
                "replicas": 2,
                "gpus": rng.choice((2, 3)),
                "duration": f"{rng.randint(2, 5)}s",
            }
        )
    return doc


# ---------------------------------------------------------------------- faults


@dataclass
class Fault:
    """One injected fault, as the report lists it."""

    at_s: float
    """Seconds since the load started."""
    kind: str
    """kill9 | restart | pause."""
    target: str
    """The process: a service, node agent or projector name, or `nats-<i>`."""
    target_kind: str
    """service | node-agent | projector | nats."""
    hold_s: float = 0.0
    """pause: how long it was stopped; NATS kill9: how long it stayed down."""
    pid: int | None = None
    outcome: str = ""
    """What happened (`done`, or why it was skipped)."""

    def line(self) -> str:
        hold = f" for {self.hold_s:.1f}s" if self.hold_s else ""
        return f"{self.at_s:7.1f}s  {self.kind:<8} {self.target_kind:<10} {self.target:<11} pid {self.pid or '-':<7}{hold}  {self.outcome}"


def plan_faults(
    rng: random.Random,
    duration_s: float,
    targets: list[tuple[str, str]],
    nats_nodes: int,
    min_faults: int | None = None,
) -> list[Fault]:
    """A seeded schedule of faults over `duration_s` (after a short warm-up, before a
    cool-down): at least `min_faults` (default 12 a minute), evenly spread with jitter, each
    on a random target (`targets`: (name, kind) of the supervised processes, plus the NATS
    nodes). Every kind of target and every kind of fault comes up at least once when there
    are enough faults."""
    pool = list(targets) + [(f"nats-{i + 1}", "nats") for i in range(nats_nodes)]
    window = max(1.0, duration_s - WARMUP_S - COOLDOWN_S)
    n = max(min_faults or 0, round(MIN_FAULTS_PER_MINUTE * duration_s / 60))
    step = window / n
    kinds = sorted({k for _, k in pool})
    rng.shuffle(kinds)
    out = []
    for i in range(n):
        at = WARMUP_S + step * i + rng.uniform(0, step * 0.6)
        of_kind = [t for t in pool if t[1] == kinds[i]] if i < len(kinds) else pool
        name, kind = rng.choice(of_kind)
        fault = rng.choices(FAULT_KINDS, weights=(4, 2, 3))[0]
        out.append(Fault(round(at, 2), fault, name, kind))
    _each_kind_on_a_process(out, rng)
    _fit_to_targets(out, rng)
    return out


def _each_kind_on_a_process(plan: list[Fault], rng: random.Random) -> None:
    """Every kind of fault at least once on a process: a missing kind replaces one of a kind
    the processes get more than once."""
    process_faults = [f for f in plan if f.target_kind != "nats"]
    for want in FAULT_KINDS:
        have = [f for f in process_faults if f.kind == want]
        spare = [f for f in process_faults if sum(g.kind == f.kind for g in process_faults) > 1]
        if not have and spare:
            rng.choice(spare).kind = want


def _fit_to_targets(plan: list[Fault], rng: random.Random) -> None:
    """A NATS node is killed, not restarted; a pause and a NATS fault last 1 to 4 s."""
    for f in plan:
        if f.target_kind == "nats" and f.kind == "restart":
            f.kind = "kill9"
        if f.kind == "pause" or f.target_kind == "nats":
            f.hold_s = round(rng.uniform(1.0, 4.0), 1)


class FaultInjector:
    """Carries out a fault plan against `supervisor`'s children and the embedded NATS
    (`nats`: an EmbeddedNats, or an EmbeddedNatsCluster with `nats_nodes` > 1), and heals
    what is still broken at the end. `say` gets one line per fault."""

    def __init__(
        self,
        supervisor: Any,
        nats: Any,
        nats_nodes: int,
        rng: random.Random,
        say: Callable[[str], None] = lambda s: None,
    ) -> None:
        self.supervisor, self.nats, self.nats_nodes = supervisor, nats, nats_nodes
        self.rng, self.say = rng, say
        self.done: list[Fault] = []
        self._paused: dict[int, float] = {}
        self._nats_busy: asyncio.Task | None = None
        self._conts: set[asyncio.Task] = set()
        self._t0 = time.monotonic()

    def pool(self) -> list[tuple[str, str]]:
        """Every target: (name, kind) of each supervised process and each NATS node."""
        kinds = {"node-agent": "node-agent", "projector": "projector"}
        return [
            (n, kinds.get(c.role, "service")) for n, c in sorted(self.supervisor.children.items())
        ] + [(f"nats-{i + 1}", "nats") for i in range(self.nats_nodes)]

    def _nats_node(self, i: int) -> Any:
        return self.nats.nodes[i] if self.nats_nodes > 1 else self.nats

    def _restart_nats(self, i: int) -> None:
        if self.nats_nodes > 1:
            self.nats.restart(i)
        else:
            self.nats.start()

    def _now(self) -> float:
        return time.monotonic() - self._t0

    def _available(self, name: str, kind: str) -> bool:
        """Whether a fault can hit `name` now (running, not paused, not being restarted; a
        NATS node only while no other one is away)."""
        if kind == "nats":
            if self._nats_busy is not None and not self._nats_busy.done():
                return False
            proc = self._nats_node(int(name.split("-")[1]) - 1)._proc  # noqa: SLF001
        else:
            child = self.supervisor.children[name]
            if child.restart_at is not None:
                return False
            proc = child.proc
        return proc is not None and proc.poll() is None and proc.pid not in self._paused

    async def inject(self, f: Fault, pool: list[tuple[str, str]]) -> None:
        """Carry out one fault (a pause and a NATS outage heal in the background). A planned
        target that is down or paused right now is swapped for a seeded choice among those
        that are up, so every planned fault lands."""
        if not self._available(f.target, f.target_kind):
            up = [t for t in pool if self._available(*t)]
            if not up:
                f.outcome = "skipped: no target up"
                return
            alike = [t for t in up if t[1] == f.target_kind]  # another of its kind, if one is up
            f.target, f.target_kind = self.rng.choice(alike or up)
            if f.target_kind == "nats":
                f.kind = "kill9" if f.kind == "restart" else f.kind
                f.hold_s = f.hold_s or round(self.rng.uniform(1.0, 4.0), 1)
            elif f.kind != "pause":
                f.hold_s = 0.0
            elif not f.hold_s:
                f.hold_s = round(self.rng.uniform(1.0, 4.0), 1)
        if f.target_kind == "nats":
            i = int(f.target.split("-")[1]) - 1
            node = self._nats_node(i)
            proc = node._proc  # noqa: SLF001 - the server's own child
            f.pid = proc.pid
            if f.kind == "kill9":
                await asyncio.to_thread(node.kill)
                self._nats_busy = asyncio.create_task(self._heal_nats(i, f.hold_s))
            else:
                os.kill(proc.pid, signal.SIGSTOP)
                self._nats_busy = asyncio.create_task(self._cont_later(proc.pid, f.hold_s))
            f.outcome = "done"
            return
        proc = self.supervisor.children[f.target].proc
        f.pid = proc.pid
        if f.kind == "kill9":
            os.kill(proc.pid, signal.SIGKILL)
        elif f.kind == "restart":
            os.kill(proc.pid, signal.SIGTERM)
        else:
            os.kill(proc.pid, signal.SIGSTOP)
            task = asyncio.create_task(self._cont_later(proc.pid, f.hold_s))
            self._conts.add(task)  # a task nobody references may be collected before it ends
            task.add_done_callback(self._conts.discard)
        f.outcome = "done"

    async def _cont_later(self, pid: int, hold_s: float) -> None:
        self._paused[pid] = time.monotonic() + hold_s
        try:
            await asyncio.sleep(hold_s)
        finally:
            self._paused.pop(pid, None)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)

    async def _heal_nats(self, i: int, hold_s: float) -> None:
        await asyncio.sleep(hold_s)
        await asyncio.to_thread(self._restart_nats, i)

    async def run(self, plan: list[Fault], stop: asyncio.Event) -> None:
        """Inject `plan`'s faults at their times (seconds since this injector was made) until
        the plan ends or `stop` is set."""
        pool = self.pool()
        for f in plan:
            delay = f.at_s - self._now()
            if delay > 0 and await sleep_or(stop, delay):
                return
            f.at_s = round(self._now(), 2)
            try:
                await self.inject(f, pool)
            except Exception as exc:  # noqa: BLE001 - a fault that could not be made is reported
                f.outcome = f"failed: {type(exc).__name__}: {exc}"[:200]
            self.done.append(f)
            self.say("fault " + f.line())

    async def heal(self) -> None:
        """Undo every fault still in force: continue paused processes, bring NATS back."""
        for pid in list(self._paused):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        for task in list(self._conts):
            task.cancel()  # each continues its process on the way out
        if self._nats_busy is not None:
            await self._nats_busy
        for i in range(self.nats_nodes):
            if not self._nats_node(i).running:
                await asyncio.to_thread(self._restart_nats, i)


# ---------------------------------------------------------------------- load


class Load:
    """Submits one job of the mix every `every_s` seconds, each tenant through its own CI
    identity (`access`: the operator's NatsAccess, for its auth directory) through the intake
    (services/runtime/intake.py), retrying a submission with the same event until it is
    stored. `acked`: job id -> the
    stream sequence of its acknowledged submission."""

    def __init__(self, access: Any, seed: int, every_s: float = 1.0) -> None:
        self.access, self.seed, self.every_s = access, seed, every_s
        self.acked: dict[str, int] = {}
        self.submitted = 0

    async def run(self, stop: asyncio.Event) -> None:
        from gpuledger.services.domain.inputs.jobfile import job_spec
        from gpuledger.services.domain.tooling.stamp import submission
        from gpuledger.services.runtime.bus import AlreadyExists, Bus
        from gpuledger.services.runtime.intake import create_client_event

        access = self.access
        buses = {
            t: await Bus.connect(
                access.url,
                name=f"chaos-{t}",
                quiet=True,
                **access.as_principal(f"ci:{t}").options(),
            )
            for t in TENANTS
        }
        rng = random.Random(self.seed * 7919 + 1)
        try:
            i = 0
            while not stop.is_set():
                spec = job_spec(job_doc(rng, i, f"chaos{self.seed}"))
                event = submission(spec, producer="chaos", now_ms=time.time_ns() // 1_000_000)
                self.submitted += 1
                bus = buses[spec.tenant]
                while not stop.is_set():  # the same event until JetStream acknowledges it
                    try:
                        seq, _dup = await asyncio.wait_for(create_client_event(bus, event), 5)
                        self.acked[spec.job_id] = seq
                        break
                    except AlreadyExists as exists:  # an earlier try landed; its ack was lost
                        if exists.last_seq:
                            self.acked[spec.job_id] = exists.last_seq
                        break
                    except Exception:  # noqa: BLE001 - NATS away: retry the same event
                        await sleep_or(stop, 0.5)
                i += 1
                await sleep_or(stop, self.every_s)
        finally:
            for bus in buses.values():
                with contextlib.suppress(Exception):
                    await bus.close()


async def sleep_or(stop: asyncio.Event, seconds: float) -> bool:
    """Sleep; True when `stop` was set meanwhile."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)
    return stop.is_set()
