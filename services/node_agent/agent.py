"""The real node agent: a thin shell around `decider.AgentDecider`, the executor and NVML.

`RealAgent` is a `Service` the generic host loop (`services/runtime/host.py`) runs. The host
folds the log with `evolve` and, when the log changes and at `next_wakeup_ms` (every
`poll_ms` while members run here, so executor observations are picked up promptly), runs the
service's effects hook `effects(state, now_ms)` and then its pure `decide(state, now_ms)`:

1. `effects` observes: folds the executor's news (`poll()`: checkpoint acknowledgements,
   outcomes) and, when due, a telemetry sample (health updates the inventory) into the state
   as local facts;
2. `effects` asks the pure decider for effects (`plan`) and performs them: `Executor.start`
   (a no-op for an allocation/rank started before, even by an earlier agent process),
   `request_checkpoint` (SIGTERM), `kill` (SIGKILL at the deadline), `forget` (once the
   member's `MemberExited` is folded); each performed effect is recorded as a local fact;
3. `decide` (pure, no I/O) returns the pure decider's events, which the host publishes with
   deterministic ids (a repeat after a crash or a restart is deduplicated).

Inventory: NVML discovery (`nvml_discovery.discover`) when NVML works; otherwise the GPUs
declared for this node in the configuration file ("declared GPUs" mode, logged clearly),
so the agent runs real processes on machines without GPUs (CI, laptops).

Directories under `work_dir`: `<node>/state` (executor records: restart safety),
`<node>/logs` (member output), and `checkpoints/<job>/rank<r>` (per job, so a resumed
member finds its checkpoint; put `work_dir` — or `checkpoint_root` — on storage shared by
the nodes when jobs may resume on another node).
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

import msgspec
import structlog

from gpuledger import events as ev
from gpuledger.events import Event, GpuInfo, NodeInfo
from gpuledger.services.node_agent import checkpoint
from gpuledger.services.node_agent.decider import (
    AgentDecider,
    AgentState,
    Checkpoint,
    Effect,
    Forget,
    Kill,
    Observed,
    Resize,
    Start,
)
from gpuledger.services.node_agent.executor import (
    CheckpointAcknowledged,
    Executor,
    MemberLaunch,
    MemberOutcome,
)

log = structlog.get_logger("gpuledger.node_agent")


def inventory_node(name: str, inventory: Any, declared: NodeInfo | None) -> NodeInfo:
    """`NodeRegistered`'s NodeInfo from an NVML `HostInventory` (CPU, memory, pool, leaf
    switch and labels from the declared node when there is one, else from the host)."""
    gpus = tuple(
        GpuInfo(
            index=g.index,
            uuid=g.uuid,
            model=g.model,
            memory_mib=g.memory_mib,
            clique=g.clique,
            sharing="mig" if g.mig_enabled else _declared_sharing(declared, g.index),
            healthy=g.healthy,
        )
        for g in inventory.gpus
    )
    if declared is not None:
        return NodeInfo(
            name=name,
            cpu_milli=declared.cpu_milli,
            memory_mib=declared.memory_mib,
            gpus=gpus,
            pool=declared.pool,
            leaf_switch=declared.leaf_switch,
            labels=dict(declared.labels),
        )
    return NodeInfo(
        name=name, cpu_milli=(os.cpu_count() or 1) * 1000, memory_mib=_host_memory_mib(), gpus=gpus
    )


def _declared_sharing(declared: NodeInfo | None, index: int) -> str:
    if declared is not None:
        for g in declared.gpus:
            if g.index == index and g.sharing != "mig":
                return g.sharing
    return "exclusive"


def _host_memory_mib() -> int:
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) // 1024
    except (OSError, ValueError):
        pass
    return 0


_SAFE = re.compile(r"[A-Za-z0-9_:-]")
_ESCAPE = re.compile(r"\.([0-9a-f]{2})")


def executor_id(allocation_id: str) -> str:
    """The executor's file-safe key for an allocation id (`job#2` -> `job.232`): every
    character outside `[A-Za-z0-9_:-]` becomes `.` + two hex digits (ids contain no `.`)."""
    return "".join(c if _SAFE.match(c) else f".{ord(c):02x}" for c in allocation_id)


def allocation_id_of(executor_key: str) -> str:
    """Inverse of `executor_id`."""
    return _ESCAPE.sub(lambda m: chr(int(m.group(1), 16)), executor_key)


def to_event_sample(s: Any) -> ev.GpuSample:
    return ev.GpuSample(
        uuid=s.uuid,
        mig_uuid=s.mig_uuid,
        sm_active=s.sm_active,
        util_source=s.util_source,
        memory_used_mib=s.memory_used_mib,
    )


class RealAgent:
    """`gpuledger run node-agent --real`: runs members of allocations placed on `node_name`."""

    name = "node-agent"

    def __init__(
        self,
        node_name: str,
        work_dir: str | os.PathLike[str],
        *,
        declared: NodeInfo | None = None,
        heartbeat_s: int = 5,
        metrics_s: int = 10,
        poll_ms: int = 200,
        nvml: Any | None = None,
        use_nvml: bool = True,
        checkpoint_root: str | os.PathLike[str] | None = None,
        python: str = sys.executable,
        member_env: dict[str, str] | None = None,
    ) -> None:
        self.instance = node_name
        self.node_name = node_name
        self.core = AgentDecider(
            node_name, heartbeat_s=heartbeat_s, metrics_s=metrics_s, poll_ms=poll_ms
        )
        self.work_dir = Path(work_dir)
        self.checkpoint_root = (
            Path(checkpoint_root) if checkpoint_root else self.work_dir / "checkpoints"
        )
        self.log_dir = self.work_dir / node_name / "logs"
        self.executor = Executor(self.work_dir / node_name / "state", python=python)
        self.member_env = dict(member_env or {})
        self.metrics_s = metrics_s
        self.log = log.bind(node=node_name)
        self.node, self.mig_uuids, self.gpus, self.sampler, self.xid = self._inventory(
            declared, nvml, use_nvml
        )

    # ------------------------------------------------------------------ inventory

    def _inventory(self, declared: NodeInfo | None, nvml: Any, use_nvml: bool):
        from gpuledger.services.node_agent import nvml_discovery

        if use_nvml:
            try:
                inv = nvml_discovery.discover(nvml, host=self.node_name)
            except nvml_discovery.NvmlUnavailable as err:
                if declared is None:
                    raise RuntimeError(
                        f"NVML is unavailable ({err}) and node {self.node_name!r} is not declared "
                        "in the configuration: nothing to register"
                    ) from err
                self.log.warning(
                    "agent.declared_gpus",
                    reason=str(err),
                    gpus=len(declared.gpus),
                    message=f"NVML unavailable: using the {len(declared.gpus)} GPU(s) "
                    f"declared for node {self.node_name} in the configuration",
                )
            else:
                from gpuledger.services.node_agent.telemetry import Sampler
                from gpuledger.services.node_agent.xid import XidWatcher

                node = inventory_node(self.node_name, inv, declared)
                mig = {
                    (g.index, m.placement_start): m.uuid for g in inv.gpus for m in g.mig_instances
                }
                sampler = Sampler(nvml)
                xid = XidWatcher(nvml)
                try:
                    xid.register(g.uuid for g in inv.gpus)
                except Exception as err:  # noqa: BLE001  (XIDs are optional)
                    self.log.warning("agent.xid_unavailable", error=repr(err))
                    xid = None
                self.log.info(
                    "agent.discovered",
                    gpus=len(node.gpus),
                    driver=inv.driver_version,
                    cuda=inv.cuda_version,
                )
                return node, mig, inv.gpus, sampler, xid
        elif declared is None:
            raise RuntimeError(f"node {self.node_name!r} is not declared in the configuration")
        else:
            self.log.info(
                "agent.declared_gpus",
                gpus=len(declared.gpus),
                message="NVML not used: GPUs declared in the configuration",
            )
        return declared, {}, (), None, None

    # ------------------------------------------------------------------ Service

    def initial_state(self) -> AgentState:
        state = self.core.initial_state()
        state.node = self.node
        state.telemetry = self.sampler is not None
        adopted = self.executor.adopt()
        for m in adopted:
            state.members[(allocation_id_of(m.allocation_id), m.rank)] = Observed(
                started=True, running=True
            )
        for m in self.executor.members():  # ended while no agent watched: reported by poll()
            state.members.setdefault(
                (allocation_id_of(m.allocation_id), m.rank), Observed(started=True)
            )
        if adopted:
            self.log.info(
                "agent.adopted",
                members=[f"{allocation_id_of(m.allocation_id)}/{m.rank}" for m in adopted],
            )
        return state

    def evolve(self, state: AgentState, seq: int, event: Event) -> AgentState:
        return self.core.evolve(state, seq, event)

    def fold_of(self, state: AgentState):
        return self.core.fold_of(state)

    def from_fold(self, fold, state: AgentState) -> AgentState:
        """A restored fold on top of this node's local facts (inventory, adopted members)."""
        return self.core.from_fold(fold, state)

    def effects(self, state: AgentState, now_ms: int) -> None:
        """The host's effects hook, run before every `decide`: observe the executor and
        telemetry, perform the effects the pure decider plans (start, checkpoint signal, kill,
        resize, forget), and record what was observed and done as local facts in `state`."""
        self._observe(state, now_ms)
        effects = self.core.plan(state, now_ms)
        for effect in effects:
            try:
                self._perform(state, effect)
            except Exception as err:  # noqa: BLE001  (one failed effect must not stop the agent)
                self.log.error("agent.effect_failed", effect=repr(effect), error=repr(err))
        if effects:
            self._observe(state, now_ms)

    def decide(self, state: AgentState, now_ms: int) -> list[Event]:
        """Pure: the events the folded log and the local facts call for (no I/O here; the
        host ran `effects` just before)."""
        return self.core.decide(state, now_ms)

    def next_wakeup_ms(self, state: AgentState, now_ms: int) -> int | None:
        return self.core.next_wakeup_ms(state, now_ms)

    def close(self) -> None:
        if self.sampler is not None:
            self.sampler.close()
        if self.xid is not None:
            self.xid.close()

    # ------------------------------------------------------------------ observing

    def _observe(self, state: AgentState, now_ms: int) -> None:
        for news in self.executor.poll():
            alloc_id = allocation_id_of(news.allocation_id)
            obs = state.members.setdefault((alloc_id, news.rank), Observed(started=True))
            if isinstance(news, CheckpointAcknowledged):
                obs.ack_step = news.step
            elif isinstance(news, MemberOutcome):
                obs.running = False
                obs.outcome = news.outcome
                obs.exit_code = news.exit_code
                if news.checkpoint_step is not None:
                    obs.ack_step = news.checkpoint_step
                self.log.info(
                    "agent.member_ended",
                    allocation=alloc_id,
                    rank=news.rank,
                    outcome=news.outcome,
                    exit_code=news.exit_code,
                    signal=news.signal,
                )
        if self.sampler is not None and (
            state.samples_at_ms is None or now_ms - state.samples_at_ms >= self.metrics_s * 1000
        ):
            self._sample(state, now_ms)

    def _sample(self, state: AgentState, now_ms: int) -> None:
        faults: dict[str, str] = {}
        if self.xid is not None:
            try:
                self.xid.poll()
                faults = dict(self.xid.faults)
            except Exception as err:  # noqa: BLE001
                self.log.warning("agent.xid_poll_failed", error=repr(err))
        try:
            rows = self.sampler.sample(self.gpus, known_faults=faults)
        except Exception as err:  # noqa: BLE001  (telemetry must never stop the agent)
            self.log.warning("agent.telemetry_failed", error=repr(err))
            return
        state.samples = tuple(to_event_sample(r) for r in rows)
        state.samples_at_ms = now_ms
        unhealthy = {r.uuid for r in rows if not r.healthy and r.mig_uuid is None}
        if state.node is not None:
            gpus = tuple(
                g
                if (g.uuid in unhealthy) != g.healthy
                else msgspec.structs.replace(g, healthy=g.uuid not in unhealthy)
                for g in state.node.gpus
            )
            if gpus != state.node.gpus:
                self.log.warning("agent.health_changed", unhealthy=sorted(unhealthy))
                state.node = msgspec.structs.replace(state.node, gpus=gpus)

    # ------------------------------------------------------------------ effects

    def _perform(self, state: AgentState, effect: Effect) -> None:
        key = (effect.allocation_id, effect.rank)
        if isinstance(effect, Start):
            launch = self._launch(state, effect)
            try:
                member = self.executor.start(launch)
            except (OSError, ValueError) as err:
                self.log.error(
                    "agent.start_failed",
                    allocation=effect.allocation_id,
                    rank=effect.rank,
                    error=repr(err),
                )
                state.members[key] = Observed(
                    started=False,
                    outcome="failed",
                    job_id=effect.job_id,
                    incarnation=effect.incarnation,
                )
                return
            state.members[key] = Observed(
                started=True,
                running=member.running,
                job_id=effect.job_id,
                world_size=effect.world_size,
                incarnation=effect.incarnation,
            )
            self.log.info(
                "agent.member_started",
                allocation=effect.allocation_id,
                rank=effect.rank,
                pid=member.pid,
                resume=effect.resume,
                adopted=member.adopted,
            )
        elif isinstance(effect, Checkpoint):
            sent = self.executor.request_checkpoint(executor_id(effect.allocation_id), effect.rank)
            state.members[key].checkpoint_requested = True
            self.log.info(
                "agent.checkpoint_requested",
                allocation=effect.allocation_id,
                rank=effect.rank,
                delivered=sent,
            )
        elif isinstance(effect, Kill):
            sent = self.executor.kill(executor_id(effect.allocation_id), effect.rank)
            state.members[key].killed = True
            self.log.warning(
                "agent.member_killed",
                allocation=effect.allocation_id,
                rank=effect.rank,
                delivered=sent,
            )
        elif isinstance(effect, Resize):
            directory = self.checkpoint_root / effect.job_id / f"rank{effect.rank}"
            try:
                checkpoint.write_world_size(directory, effect.world_size)
            except OSError as err:
                self.log.error(
                    "agent.resize_failed", allocation=effect.allocation_id, error=repr(err)
                )
                return
            state.members[key].world_size = effect.world_size
            self.log.info(
                "agent.member_resized",
                allocation=effect.allocation_id,
                rank=effect.rank,
                world_size=effect.world_size,
            )
        elif isinstance(effect, Forget):
            try:
                self.executor.forget(executor_id(effect.allocation_id), effect.rank)
            except RuntimeError:
                return  # still running (cannot happen once the outcome is known)
            del state.members[key]

    def _launch(self, state: AgentState, s: Start) -> MemberLaunch:
        node = state.node
        uuids = {g.index: g.uuid for g in node.gpus} if node is not None else {}
        if s.mig_start is not None and s.gpus and (s.gpus[0], s.mig_start) in self.mig_uuids:
            devices: tuple[str, ...] = (self.mig_uuids[(s.gpus[0], s.mig_start)],)
        else:
            devices = tuple(uuids.get(i, str(i)) for i in s.gpus)
        return MemberLaunch(
            allocation_id=executor_id(s.allocation_id),
            job_id=s.job_id,
            rank=s.rank,
            world_size=s.world_size,
            command=list(s.command),
            visible_devices=devices,
            checkpoint_dir=self.checkpoint_root / s.job_id / f"rank{s.rank}",
            resume=s.resume,
            log_dir=self.log_dir,
            env=self.member_env,
        )
