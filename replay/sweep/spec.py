"""A sweep file: the variants of a what-if sweep, as a list, a grid, or both.

    base:                     # optional: overlays every variant starts from
      set: [policy.min_runtime_s=60]
      policy: [common.yaml]
    variants:                 # optional: a list of variants
      - label: no-preemption
        set: [policy.preemption=false]
      - label: fair
        policy: [fair.yaml]
    grid:                     # optional: every combination of these `--set` keys
      policy.preemption: [true, false]
      tenants.openb.guaranteed: [34, 68]
    label: "pre={policy.preemption} g={tenants.openb.guaranteed}"   # optional: grid labels

Invariants: labels are unique and non-empty; the variants come in the file's order (the list,
then the grid's combinations with the last key changing fastest); policy files are read
here, relative to the sweep file, so a task carries their documents and no worker reads a
path. Problems are `SweepError` lines naming the key path.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gpuledger.services.domain.inputs.schema import InputError

KEYS = ("base", "variants", "grid", "label")
VARIANT_KEYS = ("label", "set", "policy")


class SweepError(InputError):
    """A sweep file that cannot be read, one `key.path: what is wrong` line per problem."""


@dataclass(frozen=True)
class VariantSpec:
    """One variant: `--set` items and `--policy` documents overlaid on the recorded config."""

    label: str
    sets: tuple[str, ...] = ()
    policies: tuple[tuple[str, Any], ...] = field(default=(), compare=False)
    """(file name, parsed document) pairs, applied before the sets."""


def _scalar_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    return str(value)


def _strings(value: Any, where: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    raise SweepError(f"{where}: expected a string or a list of strings")


def _policies(value: Any, where: str, root: Path) -> tuple[tuple[str, Any], ...]:
    docs = []
    for i, name in enumerate(_strings(value, where)):
        path = (root / name) if not Path(name).is_absolute() else Path(name)
        try:
            docs.append((str(path), yaml.safe_load(path.read_text()) or {}))
        except OSError as exc:
            raise SweepError(f"{where}[{i}]: {name}: {exc.strerror}") from None
        except yaml.YAMLError as exc:
            raise SweepError(f"{where}[{i}]: {name}: not YAML ({exc})") from None
    return tuple(docs)


def _unknown(doc: dict, known: tuple[str, ...], where: str) -> None:
    import difflib

    for key in doc:
        if key not in known:
            close = difflib.get_close_matches(str(key), known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise SweepError(f"{where}{key}: unknown key{hint}")


def _listed(doc: Any, root: Path, base: VariantSpec) -> list[VariantSpec]:
    if not isinstance(doc, list):
        raise SweepError("variants: expected a list of {label, set, policy}")
    out = []
    for i, item in enumerate(doc):
        where = f"variants[{i}]"
        if not isinstance(item, dict):
            raise SweepError(f"{where}: expected a mapping with label, set, policy")
        _unknown(item, VARIANT_KEYS, f"{where}.")
        label = item.get("label")
        if not isinstance(label, str) or not label.strip():
            raise SweepError(f"{where}.label: every listed variant needs a label")
        out.append(
            VariantSpec(
                label.strip(),
                base.sets + tuple(_strings(item.get("set"), f"{where}.set")),
                base.policies + _policies(item.get("policy"), f"{where}.policy", root),
            )
        )
    return out


def _grid(doc: Any, template: Any, base: VariantSpec) -> list[VariantSpec]:
    if not isinstance(doc, dict) or not doc:
        raise SweepError("grid: expected a mapping of KEY.PATH: [values]")
    for key, values in doc.items():
        if not isinstance(values, list) or not values:
            raise SweepError(f"grid.{key}: expected a non-empty list of values")
    if template is not None and not isinstance(template, str):
        raise SweepError("label: expected a string such as 'pre={policy.preemption}'")
    keys = list(doc)
    out = []
    for combo in itertools.product(*(doc[k] for k in keys)):
        texts = {k: _scalar_text(v) for k, v in zip(keys, combo, strict=True)}
        if template is None:
            label = " ".join(f"{k}={t}" for k, t in texts.items())
        else:
            label = template
            for k, t in texts.items():
                label = label.replace("{" + k + "}", t)
        sets = tuple(f"{k}={t}" for k, t in texts.items())
        out.append(VariantSpec(label, base.sets + sets, base.policies))
    return out


def load(path: str | Path) -> list[VariantSpec]:
    """The variants of the sweep file at `path` (SweepError on any problem)."""
    path = Path(path)
    try:
        doc = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise SweepError(f"cannot read: {exc.strerror}", str(path)) from None
    except yaml.YAMLError as exc:
        raise SweepError(f"not YAML ({exc})", str(path)) from None
    try:
        return parse(doc, path.parent)
    except SweepError as exc:
        raise SweepError(exc.problems, str(path)) from None


def parse(doc: Any, root: Path) -> list[VariantSpec]:
    """The variants of a parsed sweep document (policy files relative to `root`)."""
    if not isinstance(doc, dict):
        raise SweepError("expected a mapping with variants and/or grid")
    _unknown(doc, KEYS, "")
    base_doc = doc.get("base") or {}
    if not isinstance(base_doc, dict):
        raise SweepError("base: expected a mapping with set and/or policy")
    _unknown(base_doc, ("set", "policy"), "base.")
    base = VariantSpec(
        "",
        tuple(_strings(base_doc.get("set"), "base.set")),
        _policies(base_doc.get("policy"), "base.policy", root),
    )
    variants: list[VariantSpec] = []
    if "variants" in doc:
        variants += _listed(doc["variants"], root, base)
    if "grid" in doc:
        variants += _grid(doc["grid"], doc.get("label"), base)
    if not variants:
        raise SweepError("no variants: give variants (a list) or grid (keys and values)")
    seen: set[str] = set()
    for v in variants:
        if v.label in seen:
            raise SweepError(f"two variants are labelled {v.label!r}: labels must be unique")
        seen.add(v.label)
    return variants
