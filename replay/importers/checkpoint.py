"""The checkpoint assumption of an import, made explicit.

A trace or accounting dump does not say whether its jobs could save their work when evicted.
An imported job therefore assumes **no checkpoint** unless the mapping says otherwise: evicted
work is lost back to the job's start (or its last periodic checkpoint when an interval is
given). In a `JobSpec` that is `CheckpointPolicy(interval_s=0, save_s=NO_SAVE_S)`: a save
that can never finish before the kill deadline, so the simulated agent kills the job at the
deadline and the lost work is everything since the last checkpoint (services/domain/fold/progress),
and preemption treats it as not checkpointable (as for any job whose save outlasts its grace).

Mapping key (every importer's mapping file, and a what-if overlay's `--policy` file):

    checkpoint: none                              # the default
    checkpoint: {interval: 30m, save: 60s}        # every job
    checkpoint:
      default: none
      classes: {train: {interval: 30m, save: 60s}}      # by priority class (after mapping)
      partitions: {long: {interval: 1h, save: 2m}}      # by Slurm partition / source pool
      values: {physics: {interval: 30m, save: 60s}}     # by the source priority value (QOS...)

The most specific wins: values, then partitions, then classes, then default. `interval` and
`save` take `90`, `90s`, `30m`, `2h`; `grace` (optional) overrides the class's grace period.
`interval` left out: no periodic checkpoint; `save` left out: the job cannot save when it is
evicted (only its periodic checkpoints count).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpuledger import events as ev
from gpuledger.events.specs import MAX_QUANTITY

NO_SAVE_S = MAX_QUANTITY
"""`save_s` of a job that cannot save on request (longer than any grace period)."""

NO_CHECKPOINT = ev.CheckpointPolicy(interval_s=0, save_s=NO_SAVE_S)

_FORM_KEYS = ("interval", "save", "grace")
_RULE_KEYS = ("default", "classes", "partitions", "values")


class CheckpointError(ValueError):
    """A `checkpoint:` entry that cannot be read; one problem per line (key path first)."""


def has_checkpoint(policy: ev.CheckpointPolicy) -> bool:
    return policy.save_s < NO_SAVE_S or policy.interval_s > 0


def describe(policy: ev.CheckpointPolicy) -> str:
    """`none (evicted work lost back to its start)` or `every 30m, save 60s`."""
    if not has_checkpoint(policy):
        return "none (evicted work is lost back to the job's start)"
    parts = []
    if policy.interval_s > 0:
        parts.append(f"every {_dur(policy.interval_s)}")
    else:
        parts.append("no periodic checkpoint")
    if policy.save_s < NO_SAVE_S:
        parts.append(f"saves in {_dur(policy.save_s)} when evicted")
    else:
        parts.append("cannot save when evicted")
    return ", ".join(parts)


def _dur(s: int) -> str:
    if s and s % 3600 == 0:
        return f"{s // 3600}h"
    if s and s % 60 == 0:
        return f"{s // 60}m"
    return f"{s}s"


def _form(raw: Any, where: str, problems: list[str]) -> ev.CheckpointPolicy | None:
    from gpuledger.services.domain.inputs.quantities import seconds
    from gpuledger.services.domain.inputs.schema import _suggest

    if raw is None or (isinstance(raw, str) and raw.strip().lower() == "none"):
        return NO_CHECKPOINT
    if not isinstance(raw, dict):
        problems.append(f"{where}: expected none or {{interval: 30m, save: 60s}}, got {raw!r}")
        return None
    bad = [k for k in raw if k not in _FORM_KEYS]
    if bad:
        problems.append(
            f"{where}.{bad[0]}: unknown key"
            f"{_suggest(str(bad[0]), _FORM_KEYS) or ' (known: ' + ', '.join(_FORM_KEYS) + ')'}"
        )
        return None
    try:
        interval = seconds(f"{where}.interval", raw.get("interval", 0) or 0)
        # no `save`: the job only checkpoints periodically and cannot save when evicted
        save = seconds(f"{where}.save", raw["save"]) if raw.get("save") is not None else NO_SAVE_S
        grace = seconds(f"{where}.grace", raw["grace"]) if raw.get("grace") is not None else None
    except (TypeError, ValueError) as exc:  # QuantityError is a ValueError naming the key
        problems.append(str(exc))
        return None
    if interval < 0 or save < 0 or (grace is not None and grace < 0):
        problems.append(f"{where}: durations must not be negative")
        return None
    return ev.CheckpointPolicy(interval_s=interval, save_s=save, grace_s=grace)


@dataclass(frozen=True)
class CheckpointRules:
    """The checkpoint policy of each imported job, by value, partition or class."""

    default: ev.CheckpointPolicy = NO_CHECKPOINT
    classes: dict[str, ev.CheckpointPolicy] = field(default_factory=dict)
    partitions: dict[str, ev.CheckpointPolicy] = field(default_factory=dict)
    values: dict[str, ev.CheckpointPolicy] = field(default_factory=dict)

    def policy(
        self, priority_class: str, partition: str | None = None, value: str | None = None
    ) -> ev.CheckpointPolicy:
        if value is not None and value in self.values:
            return self.values[value]
        if partition is not None and partition in self.partitions:
            return self.partitions[partition]
        return self.classes.get(priority_class, self.default)

    def summary(self) -> str:
        """The assumption in words, for import summaries and report headers."""
        out = describe(self.default)
        for label, table in (
            ("class", self.classes),
            ("partition", self.partitions),
            ("value", self.values),
        ):
            for k in sorted(table):
                out += f"; {label} {k}: {describe(table[k])}"
        return out


def parse(raw: Any, where: str = "checkpoint") -> CheckpointRules:
    """A mapping's `checkpoint:` value; CheckpointError listing every problem."""
    from gpuledger.services.domain.inputs.schema import _suggest

    problems: list[str] = []
    if isinstance(raw, dict) and any(k in _RULE_KEYS for k in raw):
        bad = [k for k in raw if k not in _RULE_KEYS]
        if bad:
            problems.append(
                f"{where}.{bad[0]}: unknown key"
                f"{_suggest(str(bad[0]), _RULE_KEYS) or ' (known: ' + ', '.join(_RULE_KEYS) + ')'}"
            )
        default = _form(raw.get("default"), f"{where}.default", problems)
        tables: dict[str, dict[str, ev.CheckpointPolicy]] = {}
        for key in ("classes", "partitions", "values"):
            entries = raw.get(key) or {}
            if not isinstance(entries, dict):
                problems.append(f"{where}.{key}: expected a mapping of name -> checkpoint")
                continue
            table = {}
            for name, form in entries.items():
                p = _form(form, f"{where}.{key}.{name}", problems)
                if p is not None:
                    table[str(name)] = p
            tables[key] = table
        if problems:
            raise CheckpointError("\n".join(problems))
        return CheckpointRules(default=default or NO_CHECKPOINT, **tables)
    default = _form(raw, where, problems)
    if problems:
        raise CheckpointError("\n".join(problems))
    return CheckpointRules(default=default or NO_CHECKPOINT)
