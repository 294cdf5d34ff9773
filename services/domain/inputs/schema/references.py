"""A job's references checked against the file it is in: tenant, priority class, GPU model,
MIG profile, node selector."""

from gpuledger.services.domain.fold.config import DEFAULT_CLASSES
from gpuledger.services.domain.inputs.gpu_models import job_models, resolve_node
from gpuledger.services.domain.inputs.schema.config import NodeDoc
from gpuledger.services.domain.inputs.schema.errors import (
    _p,
    _suggest,
)
from gpuledger.services.domain.inputs.schema.files import FileDoc
from gpuledger.services.domain.inputs.schema.job import JobDoc


def check_references(j: JobDoc, jp: str, f: FileDoc, problems: list[str]) -> None:
    """A job's tenant, class, GPU models and MIG profile against a configuration `f` (its
    tenants, built-in and configured classes, and declared nodes; no nodes: not checked)."""
    _check_tenant_and_class(j, jp, f, problems)
    models = {_node_model(n) for n in f.cluster.nodes if n.gpus}
    for m in j.models or j.gpu_models or []:
        if models and not set(job_models((m,))) & models:
            key = "models" if j.models else "gpu_models"
            problems.append(
                f"{_p(jp, key)}: no GPU of model {m!r} in the cluster{_suggest(m, models)}"
            )
    _check_selector(j, jp, f, problems)
    if models:
        _check_mig(j, jp, f, problems)


def _check_tenant_and_class(j: JobDoc, jp: str, f: FileDoc, problems: list[str]) -> None:
    """A job's tenant is configured (no tenants: not checked), its class built in or
    configured."""
    tenants = {t.name for t in f.tenants}
    classes = {c.name for c in DEFAULT_CLASSES} | {c.name for c in f.priority_classes}
    if tenants and j.tenant not in tenants:
        problems.append(
            f"{_p(jp, 'tenant')}: tenant {j.tenant!r} is not configured{_suggest(j.tenant, tenants)}"
        )
    cls = j.klass or j.priority_class
    if cls is not None and cls not in classes:
        key = "class" if j.klass else "priority_class"
        problems.append(
            f"{_p(jp, key)}: priority class {cls!r} is not configured{_suggest(cls, classes)}"
        )


def _check_mig(j: JobDoc, jp: str, f: FileDoc, problems: list[str]) -> None:
    """A job's MIG profile is offered by some MIG-shared GPU model of the declared nodes."""
    from gpuledger.services.domain.policy.shapes import profiles_of
    from gpuledger.services.placement.mig import profile_for

    mig = j.mig or j.mig_profile
    if not mig:
        return
    mig_models = {_node_model(n) for n in f.cluster.nodes if n.gpus and "mig" in n.sharing_of()}
    if any(profile_for(m, mig) for m in mig_models):
        return
    offered = sorted({p for m in mig_models for p in profiles_of(m)})
    hint = _suggest(mig, offered) or (
        f" (offered: {', '.join(offered)})" if offered else " (no MIG GPUs)"
    )
    problems.append(
        f"{_p(jp, 'mig' if j.mig else 'mig_profile')}: MIG profile {mig!r} is offered by no "
        f"GPU of the cluster{hint}"
    )


def _node_model(n: NodeDoc) -> str:
    """A declared node's GPU model in the vocabulary (`gpu_models.resolve_node`)."""
    from gpuledger.services.domain.inputs.quantities import mebibytes

    try:
        memory = mebibytes("gpu_memory", n.gpu_memory)
    except ValueError:
        memory = 0
    return resolve_node(n.model, memory)


def _check_selector(j: JobDoc, jp: str, f: FileDoc, problems: list[str]) -> None:
    """A job's `node_selector` against the configuration's nodes (no nodes: not checked): some
    node must carry every selected label, else the job could never run."""
    if not j.node_selector or not f.cluster.nodes:
        return
    if any(all(n.labels.get(k) == v for k, v in j.node_selector.items()) for n in f.cluster.nodes):
        return
    wanted = ",".join(f"{k}={v}" for k, v in sorted(j.node_selector.items()))
    hint = _selector_hint(j.node_selector, f.cluster.nodes)
    problems.append(f"{_p(jp, 'node_selector')}: no node of the cluster carries {wanted}{hint}")


def _selector_hint(selector: dict[str, str], nodes: list[NodeDoc]) -> str:
    """A did-you-mean for the first selected label no node carries, else the labels the
    nodes carry (empty when they carry none)."""
    seen = sorted({f"{k}={v}" for n in nodes for k, v in n.labels.items()})
    absent = [
        f"{k}={v}"
        for k, v in sorted(selector.items())
        if not any(n.labels.get(k) == v for n in nodes)
    ]
    hint = _suggest(absent[0], seen) if absent else ""
    return hint or (f" (node labels: {', '.join(seen)})" if seen else "")
