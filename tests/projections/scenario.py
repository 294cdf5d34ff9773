"""A hand-built event log exercising the questions of the seeds.

Fleet: n1 (8 x H100, one NVLink clique), n2 (8 x H100, two cliques of 4), n3 (1 x A100 in MIG
mode). Tenants org/a (guaranteed 8 GPUs) and org/b (guaranteed 4 GPUs).

- train-b (org/b, 8 GPUs, train) is placed on n1 borrowing 4 GPUs above its guarantee, runs
  at 90 % SM activity, and is reclaimed for infer-a (org/a, inference, 8 GPUs) at t=600 s:
  checkpointed, 40 GPU-s of work lost, requeued (pending, WaitingForQuota).
- infer-a runs on n1 at 20 % SM activity (idle-but-allocated).
- small-a (org/a, 500m share on n2 GPU 4) completes; mig-a (1g.10gb on n3) runs.
- big-b (org/b, 2 x 8 GPUs) stays pending: Resources, 3 free GPUs on n2's cliques are useless
  to it (fragmentation).
- bad-a is rejected.
"""

from __future__ import annotations

import msgspec

from gpuledger import events as ev
from gpuledger.events.subjects import role_of
from tests.fold.story import admission

S = 1000  # ms per second


class Log:
    def __init__(self) -> None:
        self.messages: list[tuple[int, str, ev.Event]] = []
        self.n = 0

    def add(self, event: ev.Event) -> None:
        self.n += 1
        role = role_of(type(event))  # produced by the role that produces its type
        producer = event.producer or (f"{role}/0" if role else "")
        event = msgspec.structs.replace(event, event_id=f"e{self.n}", producer=producer)
        self.messages.append((self.n, ev.subject_for(event), event))


def _node(
    name: str, model: str, cliques: list[str], sharing: str = "exclusive", shared: tuple = ()
) -> ev.NodeInfo:
    return ev.NodeInfo(
        name=name,
        cpu_milli=64000,
        memory_mib=512000,
        leaf_switch="leaf-1",
        gpus=tuple(
            ev.GpuInfo(
                index=i,
                uuid=f"GPU-{name}-{i}",
                model=model,
                memory_mib=81920,
                clique=c,
                sharing="mps" if i in shared else sharing,
            )
            for i, c in enumerate(cliques)
        ),
    )


def _job(job_id: str, tenant: str, cls: str, replicas: int = 1, **res) -> ev.JobSpec:
    return ev.JobSpec(
        job_id=job_id,
        tenant=tenant,
        priority_class=cls,
        replicas=replicas,
        resources=ev.Resources(**res),
        duration_s=3600,
    )


def _shares(at: int, a_alloc: int, b_alloc: int, a_demand: int, b_demand: int) -> ev.Event:
    return ev.FairShareUpdated(
        occurred_at_ms=at,
        shares=(
            ev.TenantShare(
                tenant="org/a",
                guaranteed_gpu_milli=8000,
                fair_share_gpu_milli=8000,
                allocated_gpu_milli=a_alloc,
                demand_gpu_milli=a_demand,
            ),
            ev.TenantShare(
                tenant="org/b",
                guaranteed_gpu_milli=4000,
                fair_share_gpu_milli=8000,
                allocated_gpu_milli=b_alloc,
                demand_gpu_milli=b_demand,
            ),
        ),
    )


def _metrics(log: Log, at: int, node: str, values: dict[int, float]) -> None:
    log.add(
        ev.GpuMetricsReported(
            occurred_at_ms=at,
            node=node,
            samples=tuple(
                ev.GpuSample(uuid=f"GPU-{node}-{i}", sm_active=v, util_source="gpm")
                for i, v in values.items()
            ),
        )
    )


def build() -> list[tuple[int, str, ev.Event]]:
    log = Log()
    add = log.add
    add(ev.PriorityClassConfigured(name="train", value=50, slo_class="batch"))
    add(
        ev.PriorityClassConfigured(
            name="inference", value=125, preemptible=False, slo_class="latency-critical"
        )
    )
    add(ev.TenantConfigured(tenant="org/a", guaranteed_gpu_milli=8000))
    add(ev.TenantConfigured(tenant="org/b", guaranteed_gpu_milli=4000, limit_gpu_milli=16000))
    add(ev.NodeRegistered(node=_node("n1", "H100-80GB", ["n1-nvl0"] * 8), simulated=True))
    add(
        ev.NodeRegistered(
            node=_node("n2", "H100-80GB", ["n2-nvl0"] * 4 + ["n2-nvl1"] * 4, shared=(4,)),
            simulated=True,
        )
    )
    add(
        ev.NodeRegistered(node=_node("n3", "A100-80GB", ["n3-nvl0"], sharing="mig"), simulated=True)
    )

    # train-b: 8 GPUs on n1, borrowing
    add(ev.JobSubmitted(occurred_at_ms=1 * S, job=_job("train-b", "org/b", "train", gpus=8)))
    add(admission("train-b", "org/b", occurred_at_ms=1 * S + 100, input_seq=8))
    add(
        ev.GangPlaced(
            occurred_at_ms=2 * S,
            job_id="train-b",
            allocation_id="train-b#1",
            tenant="org/b",
            borrowing=True,
            input_seq=9,
            members=(ev.MemberPlacement(rank=0, node="n1", gpus=tuple(range(8))),),
        )
    )
    add(_shares(2 * S, 0, 8000, 0, 8000))
    add(
        ev.MemberStarted(
            occurred_at_ms=3 * S, job_id="train-b", allocation_id="train-b#1", rank=0, node="n1"
        )
    )

    # small-a: a 500m share on n2 GPU 4; mig-a: 1g.10gb on n3
    add(
        ev.JobSubmitted(occurred_at_ms=10 * S, job=_job("small-a", "org/a", "train", gpu_milli=500))
    )
    add(admission("small-a", "org/a", occurred_at_ms=10 * S))
    add(
        ev.GangPlaced(
            occurred_at_ms=12 * S,
            job_id="small-a",
            allocation_id="small-a#1",
            tenant="org/a",
            members=(ev.MemberPlacement(rank=0, node="n2", gpus=(4,), gpu_milli=500),),
        )
    )
    add(
        ev.JobSubmitted(
            occurred_at_ms=10 * S, job=_job("mig-a", "org/a", "train", mig_profile="1g.10gb")
        )
    )
    add(admission("mig-a", "org/a", occurred_at_ms=11 * S))
    add(
        ev.GangPlaced(
            occurred_at_ms=14 * S,
            job_id="mig-a",
            allocation_id="mig-a#1",
            tenant="org/a",
            members=(
                ev.MemberPlacement(
                    rank=0, node="n3", gpus=(0,), mig_profile="1g.10gb", mig_start=0
                ),
            ),
        )
    )
    add(ev.JobSubmitted(occurred_at_ms=15 * S, job=_job("bad-a", "org/a", "nope", gpus=1)))
    add(
        ev.JobRejected(
            occurred_at_ms=15 * S,
            job_id="bad-a",
            tenant="org/a",
            reason="UnknownPriorityClass",
            message="priority class 'nope' is not configured",
        )
    )

    for t in range(60, 600, 60):  # every minute: train-b busy at 90 %
        _metrics(log, t * S, "n1", {i: 0.9 for i in range(8)})
        add(ev.NodeHeartbeat(occurred_at_ms=t * S, node="n1", running=("train-b#1/0",)))

    # infer-a arrives, blocked, preemption (reclaim) of train-b
    add(ev.JobSubmitted(occurred_at_ms=590 * S, job=_job("infer-a", "org/a", "inference", gpus=8)))
    add(
        admission(
            "infer-a",
            "org/a",
            occurred_at_ms=590 * S,
            priority_class="inference",
            priority=125,
            preemptible=False,
            slo_class="latency-critical",
        )
    )
    add(
        ev.PendingReasonChanged(
            occurred_at_ms=591 * S,
            job_id="infer-a",
            reason="Resources",
            message="needs 8 H100-80GB in one NVLink clique; largest free clique has 4",
            details={
                "queue_position": 1,
                "preemption_would_help": True,
                "nodes": {"insufficient free GPUs in one clique": 2, "wrong model": 1},
            },
        )
    )
    add(
        ev.PreemptionRequested(
            occurred_at_ms=600 * S,
            job_id="train-b",
            allocation_id="train-b#1",
            beneficiary="infer-a",
            reason="Reclaim",
            deadline_ms=630 * S,
            message="org/a is 8 GPUs below its guarantee; org/b borrows 4 GPUs",
            details={
                "victims": ["train-b"],
                "alternatives": [
                    {"victims": ["small-a"], "rejected": "frees 0.5 GPU, needs 8"},
                    {"victims": ["mig-a"], "rejected": "wrong model"},
                ],
            },
            input_seq=40,
        )
    )
    add(
        ev.MemberCheckpointed(
            occurred_at_ms=605 * S,
            job_id="train-b",
            allocation_id="train-b#1",
            rank=0,
            node="n1",
            step=1200,
            progress_ms=590 * S,
        )
    )
    add(
        ev.MemberExited(
            occurred_at_ms=606 * S,
            job_id="train-b",
            allocation_id="train-b#1",
            rank=0,
            node="n1",
            outcome="preempted",
        )
    )
    add(
        ev.GangEvicted(
            occurred_at_ms=606 * S,
            job_id="train-b",
            allocation_id="train-b#1",
            reason="Reclaim",
            preempted_by="infer-a",
            checkpointed=True,
            lost_gpu_ms=40 * S,
            progress_ms=590 * S,
        )
    )
    add(
        ev.GangRequeued(
            occurred_at_ms=606 * S,
            job_id="train-b",
            after_allocation_id="train-b#1",
            resume_step=1200,
        )
    )
    add(
        ev.GangPlaced(
            occurred_at_ms=607 * S,
            job_id="infer-a",
            allocation_id="infer-a#1",
            tenant="org/a",
            members=(ev.MemberPlacement(rank=0, node="n1", gpus=tuple(range(8))),),
        )
    )
    add(
        ev.MemberStarted(
            occurred_at_ms=608 * S, job_id="infer-a", allocation_id="infer-a#1", rank=0, node="n1"
        )
    )
    add(_shares(607 * S, 8500, 0, 8500, 24000))
    add(
        ev.PendingReasonChanged(
            occurred_at_ms=608 * S,
            job_id="train-b",
            reason="Resources",
            message="needs 8 GPUs in one NVLink clique; largest free clique has 4",
            details={"queue_position": 1, "preemption_would_help": False},
        )
    )

    # big-b: 2 x 8 GPUs, stays pending
    add(
        ev.JobSubmitted(
            occurred_at_ms=610 * S, job=_job("big-b", "org/b", "train", replicas=2, gpus=8)
        )
    )
    add(admission("big-b", "org/b", occurred_at_ms=611 * S))
    add(
        ev.PendingReasonChanged(
            occurred_at_ms=612 * S,
            job_id="big-b",
            reason="Resources",
            message="needs 2 x 8 GPUs in one NVLink clique each; largest free clique has 4",
            details={
                "queue_position": 2,
                "preemption_would_help": False,
                "nodes": {"insufficient free GPUs in one clique": 2, "wrong model": 1},
            },
        )
    )
    add(
        ev.PreemptionDeclined(
            occurred_at_ms=612 * S,
            job_id="big-b",
            reason="NoVictims",
            message="no preemptible victims of lower priority",
        )
    )

    # small-a completes
    add(
        ev.MemberExited(
            occurred_at_ms=660 * S,
            job_id="small-a",
            allocation_id="small-a#1",
            rank=0,
            node="n2",
            outcome="completed",
            exit_code=0,
        )
    )
    add(ev.GangCompleted(occurred_at_ms=660 * S, job_id="small-a", allocation_id="small-a#1"))

    for t in range(660, 1260, 60):  # infer-a mostly idle: 20 %
        _metrics(log, t * S, "n1", {i: 0.2 for i in range(8)})
        add(ev.NodeHeartbeat(occurred_at_ms=t * S, node="n1", running=("infer-a#1/0",)))
    add(ev.NodeHeartbeat(occurred_at_ms=1260 * S, node="n2"))
    return log.messages
