"""Given/when/then helpers for the aggregate folds: a node, a job's life in events, a ledger
folded from them."""

from __future__ import annotations

from gpuledger import events as ev
from gpuledger.services.domain.fold.ledger import Ledger


def node(name: str = "n1", gpus: int = 8, model: str = "H100-80GB", **gpu) -> ev.NodeRegistered:
    """A node of `gpus` GPUs of `model` in one clique, heartbeating every 5 s."""
    cards = tuple(card(name, i, model, **gpu) for i in range(gpus))
    info = ev.NodeInfo(name=name, cpu_milli=64000, memory_mib=512000, gpus=cards)
    return ev.NodeRegistered(node=info, heartbeat_s=5, producer=f"node-agent/{name}")


def card(node: str, index: int, model: str, **more) -> ev.GpuInfo:
    uuid = f"GPU-{node}-{index}"
    return ev.GpuInfo(index=index, uuid=uuid, model=model, memory_mib=81920, clique="c0", **more)


def submitted(job_id: str, gpus: int = 8, tenant: str = "org/a", **spec) -> ev.JobSubmitted:
    job = ev.JobSpec(job_id=job_id, tenant=tenant, resources=ev.Resources(gpus=gpus), **spec)
    return ev.JobSubmitted(event_id=f"s-{job_id}", job=job)


ADMISSION = {"priority_class": "train", "priority": 50, "preemptible": True, "slo_class": "batch"}


def admission(job_id: str, tenant: str = "t", **fields) -> ev.JobAdmitted:
    """`JobAdmitted` of `job_id`: class train, priority 50, preemptible, SLO batch, unless
    `fields` (any of the event's) say otherwise."""
    return ev.JobAdmitted(job_id=job_id, tenant=tenant, **(ADMISSION | fields))


def admitted(job_id: str, tenant: str = "org/a", preemptible: bool = True) -> ev.JobAdmitted:
    """`admission` as the admission service publishes it."""
    return admission(job_id, tenant, preemptible=preemptible, producer="admission/0")


def placed(job_id: str, *ranks_on: tuple[str, tuple[int, ...]], at: int = 0, tenant: str = "org/a"):
    members = tuple(
        ev.MemberPlacement(rank=r, node=n, gpus=g) for r, (n, g) in enumerate(ranks_on)
    ) or (ev.MemberPlacement(rank=0, node="n1", gpus=tuple(range(8))),)
    return ev.GangPlaced(
        job_id=job_id,
        allocation_id=f"{job_id}#1",
        tenant=tenant,
        members=members,
        producer="scheduler/0",
        occurred_at_ms=at,
    )


def given(*events: ev.Event) -> Ledger:
    ledger = Ledger()
    for seq, e in enumerate(events, 1):
        ledger.apply(seq, e)
    return ledger


def when(ledger: Ledger, *events: ev.Event):
    """Fold `events` after the ledger's last; the last one's refusal (None if accepted)."""
    refusal = None
    for e in events:
        refusal = ledger.fold(ledger.last_seq + 1, e)
    return refusal
