"""What-if overlays: change only what the user changes, on top of the recorded configuration.

`gpuledger replay LOG --config FILE` replaces the whole recorded configuration (tenants,
classes, policy, nodes). An overlay instead starts from what the log recorded and changes
only the keys it names:

- `--set KEY=VALUE`: one key path, checked strictly (unknown keys get a did-you-mean):
  `policy.<field>=V` (any `policy:` key of a configuration file), `tenants.<name>.<field>=V`
  (`guaranteed`, `limit`, `weight`, `guaranteed_by_model.<model>`, `borrowing_limit`,
  `lending_limit`, `borrowing_limit_by_model.<model>`, `lending_limit_by_model.<model>`) and
  `priority_classes.<name>.<field>=V` (`value`, `preemptible`, `slo_class`, `grace_s`,
  `allow_timeslice`, `description`) of a tenant or class the log configured. VALUE is read
  as a YAML scalar (`false`, `30`, `2h`, `none` -> null for `limit`/`max_lost_gpu_hours`).
- `--policy FILE`: a configuration document (the strict schema of `gpuledger check`) whose
  `policy:` keys are merged into the recorded policy (keys it leaves out keep their recorded
  values), whose `tenants:` and `priority_classes:` entries add or replace those of the same
  name, whose `schedules:` are added, and whose `cluster.nodes`, when given, replace the
  recorded nodes. A `timeline:` is refused (it is a scenario, not a policy).

The checkpoint assumption of the replayed jobs ("what if we had checkpointing"): `--set
checkpoint=none`, `--set checkpoint.interval=30m`, `--set checkpoint.save=60s` (`.grace`
too), or a `--policy` file's `checkpoint:` key (the forms of an import mapping:
`none`, `{interval: 30m, save: 60s}`, or `{default: ..., classes: {NAME: ...}}`; a job's
partition and source value are not in the log, so `partitions:`/`values:` match nothing).
It replaces the checkpoint policy of every submitted job (of the named classes).

Overlays are applied in command-line order: every `--policy` file, then every `--set`. The
result is appended to the recorded configuration as configuration events at the start of the
replay, so the recorded ones are folded first and the overlay wins.
"""

from __future__ import annotations

from dataclasses import replace as dc_replace
from typing import Any

import msgspec
import yaml

from gpuledger import events as ev
from gpuledger.events.slurm_policy import SlurmPolicy
from gpuledger.services.domain.fold.config import ConfigState
from gpuledger.services.domain.inputs.configfile import config_events, node_infos
from gpuledger.services.domain.inputs.gpu_models import resolve
from gpuledger.services.domain.inputs.schema import (
    ClassDoc,
    InputError,
    PolicyDoc,
    TenantDoc,
    _suggest,
    collect,
    validate_file,
)
from gpuledger.services.domain.policy.quota import (
    borrowing_limit,
    borrowing_limits_by_model,
    lending_limit,
    lending_limits_by_model,
)

ROOTS = ("policy", "tenants", "priority_classes", "checkpoint")
_OVERLAY_KEYS = (
    "checkpoint",
    "policy",
    "tenants",
    "priority_classes",
    "schedules",
    "cluster",
    "name",
    "description",
)


class OverlayError(InputError):
    """An overlay that cannot be applied: one line per problem, naming the key path."""


def recorded(config_events_: list[ev.Event]) -> ConfigState:
    """The configuration in force after folding the recorded configuration events."""
    cfg = ConfigState()
    for e in config_events_:
        cfg.apply(e)
    return cfg


def _scalar(text: str) -> Any:
    try:
        value = yaml.safe_load(text) if text.strip() else ""
    except yaml.YAMLError:
        return text
    if isinstance(value, str) and value.lower() in ("none", "null", "~"):
        return None
    return value


def _milli_text(milli: int | None) -> str | None:
    return None if milli is None else f"{milli}m"


def _tenant_doc(t: ev.TenantConfigured) -> dict[str, Any]:
    return {
        "name": t.tenant,
        "guaranteed": _milli_text(t.guaranteed_gpu_milli),
        "limit": _milli_text(t.limit_gpu_milli),
        "weight": t.over_quota_weight,
        "guaranteed_by_model": {m: _milli_text(v) for m, v in t.guaranteed_by_model.items()},
        "borrowing_limit": _milli_text(borrowing_limit(t)),
        "lending_limit": _milli_text(lending_limit(t)),
        "borrowing_limit_by_model": {
            m: _milli_text(v) for m, v in borrowing_limits_by_model(t).items()
        },
        "lending_limit_by_model": {
            m: _milli_text(v) for m, v in lending_limits_by_model(t).items()
        },
        **_users_doc(t),
        **_limits_doc(t),
    }


def _limits_doc(t: ev.TenantConfigured) -> dict[str, Any]:
    """`{limits: ...}` for a tenant whose configuration names its submit limits."""
    s = t.submit_limits
    if not isinstance(s, ev.SubmitLimit):
        return {}
    keys = ("submit_jobs", "array_size")
    return {"limits": {k: getattr(s, k) for k in keys if getattr(s, k) is not msgspec.UNSET}}


def _users_doc(t: ev.TenantConfigured) -> dict[str, Any]:
    """`{users: ...}` for a tenant with per-user limits (else nothing: its doc as before)."""
    u = t.user_limits
    if not isinstance(u, ev.UserLimits):
        return {}

    def one(x: ev.UserLimit) -> dict[str, Any]:
        doc: dict[str, Any] = {"running_jobs": x.running_jobs, "gpus": _milli_text(x.gpu_milli)}
        for key in ("submit_jobs", "array_size", "weight"):  # only when set: a doc as before
            if getattr(x, key) is not msgspec.UNSET:
                doc[key] = getattr(x, key)
        if isinstance(x.gpu_milli_by_model, dict):
            doc["gpus_by_model"] = {m: _milli_text(v) for m, v in x.gpu_milli_by_model.items()}
        return doc

    return {
        "users": {
            "default": one(u.default),
            "overrides": {k: one(v) for k, v in u.overrides.items()},
        }
    }


def _class_doc(c: ev.PriorityClassConfigured) -> dict[str, Any]:
    return {
        "name": c.name,
        "value": c.value,
        "preemptible": c.preemptible,
        "slo_class": c.slo_class,
        "description": c.description,
        "grace_s": c.grace_s,
        "allow_timeslice": c.allow_timeslice,
        **(
            {"default_time_limit": c.default_time_limit_s}
            if c.default_time_limit_s is not msgspec.UNSET
            else {}
        ),
        **(
            {"max_time_limit": c.max_time_limit_s}
            if c.max_time_limit_s is not msgspec.UNSET
            else {}
        ),
        "override": True,
    }


def _policy_dict(p: ev.Policy) -> dict[str, Any]:
    """The policy's fields, those left unset (added after v1) left out."""
    return {k: v for k, v in msgspec.structs.asdict(p).items() if v is not msgspec.UNSET}


def _check_policy(doc: dict[str, Any], where: str) -> ev.Policy:
    problems: list[str] = []
    parsed = collect(doc, PolicyDoc, "policy", problems)
    if problems:
        raise OverlayError([f"{where}: {p}" for p in problems])
    return ev.Policy(**msgspec.structs.asdict(parsed))


BY_MODEL = ("guaranteed_by_model", "borrowing_limit_by_model", "lending_limit_by_model")
"""Tenant keys with a sub-key per GPU model (`tenants.NAME.KEY.MODEL=V`)."""


def _entry_key(where: str, field: str, shape: Any) -> tuple[str, str]:
    """`KEY` or `KEY.MODEL` of an entry of type `shape`: a key it has (not its name or
    override), a model only under a per-model key. `where`: the error's prefix."""
    fields = [
        f.encode_name
        for f in msgspec.structs.fields(shape)
        if f.encode_name not in ("name", "override")
    ]
    top, _, sub = field.partition(".")
    if top not in fields:
        hint = _suggest(top, fields) or f" (known keys: {', '.join(fields)})"
        raise OverlayError(f"{where}.{top}: unknown key{hint}")
    if sub and top not in BY_MODEL:
        raise OverlayError(f"{where}.{top}: has no sub-keys")
    return top, sub


def _check_overlay_keys(doc: Any, file: str) -> None:
    """An overlay file is a mapping of the keys an overlay takes (no timeline)."""
    if not isinstance(doc, dict):
        raise OverlayError(
            f"{file}: (top level): expected a mapping of keys, got {type(doc).__name__}"
        )
    if "timeline" in doc:
        raise OverlayError(
            f"{file}: timeline: a policy overlay cannot hold a timeline (that is a scenario)"
        )
    unknown = [k for k in doc if k not in _OVERLAY_KEYS]
    if unknown:
        k = unknown[0]
        raise OverlayError(
            f"{file}: {k}: unknown key{_suggest(k, _OVERLAY_KEYS) or ' (known keys: ' + ', '.join(_OVERLAY_KEYS) + ')'}"
        )


class Overlay:
    """Accumulates overlays on a recorded configuration; `events()` gives what to append."""

    def __init__(self, recorded_config: list[ev.Event]) -> None:
        cfg = recorded(recorded_config)
        self.policy: dict[str, Any] = _policy_dict(cfg.policy)
        self.policy_changed = False
        self.tenants: dict[str, dict[str, Any]] = {
            n: _tenant_doc(t) for n, t in cfg.tenants.items()
        }
        self.classes: dict[str, dict[str, Any]] = {n: _class_doc(c) for n, c in cfg.classes.items()}
        self.changed_tenants: list[str] = []
        self.changed_classes: list[str] = []
        self.schedules: list[dict[str, Any]] = []
        self.nodes: tuple[ev.NodeInfo, ...] | None = None
        self.changes: list[str] = []
        self.checkpoint: Any = None
        self.checkpoint_set = False

    def _set_slurm(self, where: str, key: str, value: Any) -> None:
        """`policy.slurm.<key>=V`: one scalar of the `slurm` profile's site values."""
        fields = [
            f.encode_name
            for f in msgspec.structs.fields(SlurmPolicy)
            if f.encode_name not in ("weights", "partitions", "qos")
        ]
        if key not in fields:
            hint = _suggest(key, fields) or f" (known keys: {', '.join(fields)})"
            raise OverlayError(f"{where}: policy.slurm.{key}: unknown key{hint}")
        current = self.policy.get("slurm", msgspec.UNSET)
        site = msgspec.to_builtins(current if current is not msgspec.UNSET else SlurmPolicy())
        new = {**self.policy, "slurm": {**site, key: value}}
        self.policy = _policy_dict(_check_policy(new, where))
        self.policy_changed = True
        self.changes.append(f"policy.slurm.{key}={value!r}")

    # ---------------------------------------------------------------- --set KEY=VALUE
    def set(self, item: str) -> None:
        where = f"--set {item}"
        if "=" not in item:
            raise OverlayError(f"{where}: expected KEY=VALUE (e.g. policy.preemption=false)")
        key, _, text = item.partition("=")
        key = key.strip()
        value = _scalar(text)
        root, _, rest = key.partition(".")
        if root not in ROOTS:
            raise OverlayError(
                f"{where}: {root!r}: unknown key{_suggest(root, ROOTS) or ' (known: ' + ', '.join(ROOTS) + ')'}"
            )
        if root == "checkpoint":
            self._set_checkpoint(where, rest, value)
            self.changes.append(f"{key}={value!r}")
            return
        if root == "policy" and rest.startswith("slurm."):
            self._set_slurm(where, rest.removeprefix("slurm."), value)
            return
        if root == "policy":
            self._set_policy(where, rest, value)
            return
        self._set_entry(where, key, root, rest, value)

    def _set_policy(self, where: str, rest: str, value: Any) -> None:
        """`--set policy.KEY=V`: one known policy key, the policy checked as a whole."""
        if not rest or "." in rest:
            raise OverlayError(f"{where}: expected policy.<key> (keys: {', '.join(self.policy)})")
        if rest not in self.policy:
            hint = _suggest(rest, self.policy) or f" (known keys: {', '.join(self.policy)})"
            raise OverlayError(f"{where}: policy.{rest}: unknown key{hint}")
        new = {**self.policy, rest: value}
        _check_policy(new, where)
        self.policy = new
        self.policy_changed = True
        self.changes.append(f"policy.{rest}={value!r}")

    def _set_entry(self, where: str, key: str, root: str, rest: str, value: Any) -> None:
        """`--set tenants.NAME.KEY=V` or `priority_classes.NAME.KEY=V` (a per-model key takes
        `.MODEL`): a recorded entry's known key, the entry checked as a whole."""
        table, changed, shape, label = (
            (self.tenants, self.changed_tenants, TenantDoc, "tenant")
            if root == "tenants"
            else (self.classes, self.changed_classes, ClassDoc, "priority class")
        )
        # names may hold '/', never '.': the name is the token after the root, the rest the field
        name, _, field = rest.partition(".")
        if not name or not field:
            raise OverlayError(f"{where}: expected {root}.<name>.<key>")
        if name not in table:
            hint = _suggest(name, table) or f" (known: {', '.join(sorted(table)) or 'none'})"
            raise OverlayError(
                f"{where}: {root}.{name}: no {label} {name!r} in the recorded configuration{hint}"
            )
        top, sub = _entry_key(f"{where}: {root}.{name}", field, shape)
        entry = dict(table[name])
        # a model name in the vocabulary (`a100_80g` -> `A100-80GB`), as the recorded keys
        entry[top] = {**entry[top], resolve(sub): value} if sub else value
        problems: list[str] = []
        collect(entry, shape, f"{root}.{name}", problems)
        if problems:
            raise OverlayError([f"{where}: {p}" for p in problems])
        table[name] = entry
        if name not in changed:
            changed.append(name)
        self.changes.append(f"{key}={value!r}")

    def _set_checkpoint(self, where: str, rest: str, value: Any) -> None:

        if not rest:
            new: Any = value
        else:
            if rest not in ("interval", "save", "grace"):
                hint = _suggest(rest, ("interval", "save", "grace"))
                raise OverlayError(
                    f"{where}: checkpoint.{rest}: unknown key{hint or ' (known: interval, save, grace)'}"
                )
            new = dict(self.checkpoint) if isinstance(self.checkpoint, dict) else {}
            new[rest] = value
        self._checkpoint(new, where)

    def checkpoint_rules(self):
        """The overlaid checkpoint rules, or None when no overlay names a checkpoint."""
        from gpuledger.replay.importers.checkpoint import parse

        return parse(self.checkpoint) if self.checkpoint_set else None

    # ---------------------------------------------------------------- --policy FILE
    def add_file(self, doc: Any, file: str) -> None:
        _check_overlay_keys(doc, file)
        # classes named like a recorded one replace it: no `override` needed for those
        raw = dict(doc)
        if "checkpoint" in raw:
            self._file_checkpoint(raw.pop("checkpoint"), file)
        raw_classes = [
            dict(c, override=True)
            if isinstance(c, dict) and c.get("name") in self.classes and "override" not in c
            else c
            for c in raw.get("priority_classes") or []
        ]
        if raw_classes:
            raw["priority_classes"] = raw_classes
        try:
            parsed = validate_file(raw)
        except InputError as exc:
            raise OverlayError([f"{file}: {p}" for p in exc.problems]) from None
        if isinstance(doc.get("policy"), dict):
            new = {**self.policy, **doc["policy"]}
            _check_policy(new, file)
            self.policy = new
            self.policy_changed = True
            self.changes += [f"policy.{k}={v!r}" for k, v in doc["policy"].items()]
        self._replace_entries(raw.get("tenants") or [], raw_classes)
        self.schedules += list(raw.get("schedules") or [])
        if parsed.cluster.nodes:
            self.nodes = node_infos(raw)
            self.changes.append(f"{len(self.nodes)} nodes")

    def _file_checkpoint(self, rules: Any, file: str) -> None:
        """An overlay file's `checkpoint:` rules, checked, replace the recorded ones."""
        self.changes.append(f"checkpoint: {self._checkpoint(rules, file).summary()}")

    def _checkpoint(self, rules: Any, where: str) -> Any:
        """Check `rules` (OverlayError naming `where` per problem) and make them the overlaid
        checkpoint rules; the parsed rules."""
        from gpuledger.replay.importers.checkpoint import CheckpointError, parse

        try:
            parsed = parse(rules, "checkpoint")
        except CheckpointError as exc:
            raise OverlayError([f"{where}: {p}" for p in str(exc).splitlines()]) from None
        self.checkpoint = rules
        self.checkpoint_set = True
        return parsed

    def _replace_entries(self, tenants: list, classes: list) -> None:
        """An overlay file's tenants and classes replace the recorded ones of their names."""
        for t in tenants:
            self.tenants[t["name"]] = t
            if t["name"] not in self.changed_tenants:
                self.changed_tenants.append(t["name"])
            self.changes.append(f"tenant {t['name']}")
        for c in classes:
            self.classes[c["name"]] = c
            if c["name"] not in self.changed_classes:
                self.changed_classes.append(c["name"])
            self.changes.append(f"priority class {c['name']}")

    # ---------------------------------------------------------------- result
    def document(self) -> dict[str, Any]:
        doc: dict[str, Any] = {}
        if self.changed_tenants:
            doc["tenants"] = [
                {k: v for k, v in self.tenants[n].items() if v is not None}
                for n in self.changed_tenants
            ]
        if self.changed_classes:
            doc["priority_classes"] = [
                {k: v for k, v in self.classes[n].items() if v is not None}
                for n in self.changed_classes
            ]
        if self.policy_changed:
            doc["policy"] = self.policy
        if self.schedules:
            doc["schedules"] = self.schedules
        return doc

    def events(self, at_ms: int) -> list[ev.Event]:
        doc = self.document()
        if not doc:
            return []
        try:
            return config_events(doc, producer="whatif-overlay", at_ms=at_ms)
        except InputError as exc:
            raise OverlayError(exc.problems) from None


def apply_overlays(inputs, sets: list[str] = (), files: list[tuple[str, Any]] = ()):
    """`inputs` (a `replay.whatif.Inputs`) with the overlays appended to its configuration.

    `files` are `(name, parsed document)` pairs of `--policy` files; `sets` the `--set` items.
    Returns `(inputs, changes)`; raises OverlayError."""
    overlay = Overlay(inputs.config)
    for name, doc in files:
        overlay.add_file(doc, name)
    for item in sets:
        overlay.set(item)
    extra = overlay.events(inputs.start_ms)
    nodes = overlay.nodes if overlay.nodes is not None else inputs.nodes
    timeline = inputs.timeline
    rules = overlay.checkpoint_rules()
    if rules is not None:
        timeline = [
            (
                t,
                msgspec.structs.replace(
                    e,
                    job=msgspec.structs.replace(
                        e.job, checkpoint=rules.policy(e.job.priority_class)
                    ),
                ),
            )
            if isinstance(e, ev.JobSubmitted)
            else (t, e)
            for t, e in timeline
        ]
    return (
        dc_replace(inputs, config=[*inputs.config, *extra], nodes=nodes, timeline=timeline),
        overlay.changes,
    )
