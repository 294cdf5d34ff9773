"""What the Slurm and Kubernetes importers share about naming: priority classes for source
priorities (Slurm QOS, Kubernetes PriorityClass), tenants, and the optional mapping file that
overrides both.

A source priority name becomes a priority class of the same name (lower-cased; characters
other than letters, digits, `_` and `-` become `-`) with a value from `DEFAULT_VALUES` by
name, preemptible, SLO class `interactive` for the interactive-sounding names and `batch`
otherwise. Every class is preemptible by default because the imported tenants have no
guarantee unless the mapping gives them one (non-preemptible work may only use guaranteed
quota).

Mapping file (YAML, strict: unknown keys are errors with a did-you-mean):

    tenant_from: account          # slurm: account | user | partition | account/user
                                  # kubernetes: namespace | queue (Kueue LocalQueue, else namespace)
    tenants: {physics: science/physics}        # source value -> tenant path
    classes: {normal: train, high: urgent}     # source priority -> class name
    priority_classes:                          # classes to define (the config file schema)
      - {name: urgent, value: 200, preemptible: false, slo_class: latency-critical}
    quotas:                                    # tenant quotas (the config file's tenants:)
      - {name: science/physics, guaranteed: 16}
    policy: {preemption: true}                 # the recorded policy (config file's policy:)
    gpu_models: {a100: A100-80GB}              # site GPU names -> canonical (services.domain.inputs.gpu_models)
    mig_model: H100-80GB                       # slurm: the GPUs of MIG-typed gres (default: by profiles)
    checkpoint: none                           # or {interval: 30m, save: 60s}, or by
                                               # classes/partitions/values (importers.checkpoint)
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Literal

import msgspec

from gpuledger.services.domain.inputs.gpu_models import Vocabulary
from gpuledger.services.domain.inputs.schema import (
    ClassDoc,
    InputError,
    Strict,
    TenantDoc,
    collect,
    validate_file,
)

DEFAULT_VALUES: dict[str, int] = {
    "scavenger": 10,
    "standby": 10,
    "preemptible": 10,
    "low": 20,
    "lowest": 10,
    "besteffort": 10,
    "best-effort": 10,
    "normal": 50,
    "default": 50,
    "medium": 50,
    "batch": 50,
    "debug": 75,
    "devel": 75,
    "interactive": 75,
    "high": 100,
    "urgent": 150,
    "critical": 200,
}
INTERACTIVE = {"debug", "devel", "interactive"}


class Mapping(Strict, kw_only=True):
    tenant_from: str | None = None
    tenants: dict[str, str] = {}
    classes: dict[str, str] = {}
    priority_classes: list[ClassDoc] = []
    quotas: list[TenantDoc] = []
    policy: dict[str, Any] = {}
    default_class: str | None = None
    mig_model: str | None = None
    """The GPU model of MIG instances a Slurm node lists by profile only (`H100-80GB`);
    unset: the first MIG family offering every profile (`replay.importers.migmap`)."""
    gpu_models: dict[str, str] = {}
    """Site GPU model names (Slurm gres types, product labels) -> canonical names, applied
    before the GPU model vocabulary (`services.domain.inputs.gpu_models`)."""
    checkpoint: Any = None
    """`none` (default), `{interval: 30m, save: 60s}`, or by class / partition / source
    value (replay.importers.checkpoint)."""

    @property
    def checkpoint_rules(self):
        from gpuledger.replay.importers.checkpoint import parse

        return parse(self.checkpoint)


TENANT_FROM = {
    "slurm": ("account", "user", "partition", "account/user"),
    "kubernetes": ("namespace", "queue"),
}


def load_mapping(path, source: Literal["slurm", "kubernetes"]) -> Mapping:
    from gpuledger.replay.importers.common import TraceImportError, read_yaml

    if path is None:
        return Mapping()
    raw = read_yaml(path)
    problems: list[str] = []
    m = collect(raw, Mapping, "", problems)
    if m is not None:
        allowed = TENANT_FROM[source]
        if m.tenant_from is not None and m.tenant_from not in allowed:
            from gpuledger.services.domain.inputs.schema import _suggest

            problems.append(
                f"tenant_from: {m.tenant_from!r} is not one of {', '.join(allowed)}"
                f"{_suggest(m.tenant_from, allowed)}"
            )
        if m.policy:
            try:
                validate_file({"policy": m.policy})
            except InputError as exc:
                problems += exc.problems
        from gpuledger.replay.importers.checkpoint import CheckpointError, parse

        try:
            parse(m.checkpoint)
        except CheckpointError as exc:
            problems += str(exc).splitlines()
    if problems:
        raise TraceImportError("\n".join(f"{path}: {p}" for p in problems))
    return m


_BAD = re.compile(r"[^A-Za-z0-9_-]+")


def token(value: str, fallback: str) -> str:
    """`value` as a safe name (class, tenant segment): lower-cased, odd characters -> `-`."""
    out = _BAD.sub("-", value.strip().lower()).strip("-")
    return out or fallback


class Naming:
    """Source priorities -> classes and source owners -> tenants, under a mapping."""

    def __init__(self, mapping: Mapping, default_priority: str) -> None:
        self.mapping = mapping
        self.default_priority = default_priority
        self.classes: dict[str, dict[str, Any]] = {
            c.name: {k: v for k, v in msgspec.structs.asdict(c).items() if k != "override"}
            for c in mapping.priority_classes
        }
        self.tenants: set[str] = set()
        self.auto: set[str] = set()
        """Classes made up from a source name (not in the mapping, not built in)."""
        self.gpu = Vocabulary(mapping.gpu_models)
        """GPU model names of the source -> the vocabulary (unknown ones listed once)."""
        self.notes: list[str] = []
        """Warnings an importer collected (MIG geometry), one line each."""
        self.known_jobs: dict[str, list[tuple[str, str]]] = {}
        """Job ids a dump imports by base id, with their tenants (Slurm `Dependency`)."""
        self.arrays: dict[str, dict[str, tuple[str, str]]] = {}
        """Slurm array tasks imported so far, by base id: `{'123': {'123_4': ('123@4', '123'),
        '123_9': ('123_9', '123_9')}}` (its imported id; the job it is in)."""
        self.dependencies_dropped = 0
        """Source dependencies an importer could not keep."""
        self.partition: Callable[[str], dict[str, str] | None] = lambda _: None
        """A source partition / pool -> the node selector of its jobs (an importer sets it,
        e.g. `labels.PartitionSelectors`); by default none."""

    def class_name(self, priority: str) -> str:
        """The class a source priority maps to (without recording it)."""
        priority = priority.strip() or self.default_priority
        return (
            self.mapping.classes.get(priority)
            or self.mapping.default_class
            or token(priority, self.default_priority)
        )

    def class_for(self, priority: str) -> str:
        priority = priority.strip() or self.default_priority
        name = self.class_name(priority)
        if name not in self.classes and name not in BUILT_IN:
            key = name.lower()
            self.auto.add(name)
            self.classes[name] = {
                "name": name,
                "value": DEFAULT_VALUES.get(key, 50),
                "preemptible": True,
                "slo_class": "interactive" if key in INTERACTIVE else "batch",
                "description": f"imported priority {priority!r}",
            }
        return name

    def tenant_for(self, owner: str, fallback: str) -> str:
        owner = owner.strip()
        tenant = (
            self.mapping.tenants.get(owner)
            or "/".join(token(s, fallback) for s in owner.split("/") if s)
            or fallback
        )
        self.tenants.add(tenant)
        return tenant

    def warnings(self) -> dict[str, list[str]]:
        """`{warnings: [line, ...]}` for the import summary (empty when there is none)."""
        line = self.gpu.warning()
        lines = [*self.notes, *([line] if line else [])]
        return {"warnings": lines} if lines else {}

    def document(self, total_gpus: int) -> dict[str, Any]:
        """The configuration the import records: every tenant seen (guarantee 0, weight 1,
        unless `quotas` says otherwise), every class used or defined, the mapping's policy."""
        quotas = {
            t.name: {
                k: v for k, v in msgspec.structs.asdict(t).items() if v is not None and v != {}
            }
            for t in self.mapping.quotas
        }
        tenants = [
            quotas.get(t, {"name": t, "guaranteed": 0, "weight": 1}) for t in sorted(self.tenants)
        ]
        tenants += [q for n, q in sorted(quotas.items()) if n not in self.tenants]
        classes = [
            self.classes[c]
            for c in sorted(self.classes)
            if c not in BUILT_IN or c in {pc.name for pc in self.mapping.priority_classes}
        ]
        for c in classes:
            if c["name"] in BUILT_IN:
                c["override"] = True
        return {
            "tenants": tenants,
            "priority_classes": classes,
            "policy": dict(self.mapping.policy),
        }


BUILT_IN = {"train", "interactive", "build", "inference"}
