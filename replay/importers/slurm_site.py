"""A Slurm site's recorded policy: `slurm.conf`, `sacctmgr show qos -P` and `sacctmgr show
assoc -P` read into one typed record (`SitePolicy`), written beside an import as
`OUT.site.json` (`gpuledger import slurm --slurm-conf FILE --qos FILE --assoc FILE`).

What is read (everything else is ignored; an unknown key is fine, a malformed value of a key
read here is a `SiteConfigError` naming the file and line):

- `slurm.conf`: `PartitionName=` lines (`Nodes`, `PriorityTier`, `PreemptMode`, `MaxTime`,
  `GraceTime`, `Default`; `PartitionName=DEFAULT` sets the defaults of the lines after it),
  `PriorityType`, `PriorityWeight{Age,FairShare,JobSize,Partition,QOS,Assoc}`,
  `PriorityMaxAge`, `PriorityDecayHalfLife`, `PriorityCalcPeriod`, `PreemptType`, `PreemptMode`,
  `PreemptExemptTime`, `KillWait`, `OverTimeLimit`, `SchedulerType`, `SchedulerParameters` (`sched_interval`,
  `bf_interval`, `kill_invalid_depend`). Keys are case-insensitive, `#` starts a comment, a
  trailing `\\` continues a line; `Include` lines are not followed;
- `sacctmgr show qos -P`: `Name`, `Priority`, `Preempt`, `PreemptMode`, `PreemptExemptTime`,
  `GraceTime` (the header names the columns);
- `sacctmgr show assoc -P`: the account rows (empty `User`): `Account`, `ParentName` or the
  tree order, `Share` (`Fairshare` in some versions; `parent` = none of its own).

The record maps the site onto gpuledger's terms: accounts are tenants (with their fair-share
shares), QOS are priority classes (priority, whom they preempt and how), partitions are node
pools (tier, preempt mode, time limit). `protections` says which of gpuledger's own
protections the site had an equivalent of; an imported baseline turns the others off.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import msgspec

from gpuledger.replay.importers.common import TraceImportError
from gpuledger.replay.importers.slurm_sacct import expand_nodelist


class SiteConfigError(TraceImportError):
    """A site file that cannot be read, or a malformed value in it (`file:line: ...`)."""


class SitePartition(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    nodes: tuple[str, ...]
    """Its nodes (`ALL`: every node of the import, left empty here)."""
    all_nodes: bool = False
    priority_tier: int = 1
    preempt_mode: str = ""
    """The partition's `PreemptMode` ('' = the cluster's)."""
    max_time_s: int | None = None
    """`MaxTime` (None: UNLIMITED)."""
    grace_time_s: int = 0
    """`GraceTime`: how long a preempted job may run on after it is signalled."""
    default: bool = False


class SiteQos(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    priority: int = 0
    preempt: tuple[str, ...] = ()
    """The QOS this one may preempt."""
    preempt_mode: str = ""
    """'' or `cluster`: the cluster's `PreemptMode`."""
    preempt_exempt_time_s: int | None = None
    grace_time_s: int = 0


class SiteAccount(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    parent: str = ""
    shares: int | None = None
    """Fair-share shares (None: `parent`, it shares its parent's)."""


class SitePolicy(msgspec.Struct, frozen=True, kw_only=True):
    """What a Slurm site's configuration says about ordering, preemption and enforcement."""

    priority_type: str = "priority/basic"
    weights: dict[str, int] = {}
    """`PriorityWeight*` by factor (`age`, `fairshare`, `jobsize`, `partition`, `qos`, `assoc`)."""
    priority_max_age_s: int = 7 * 86_400
    priority_decay_half_life_s: int = 7 * 86_400
    priority_calc_period_s: int = 300
    """`PriorityCalcPeriod` (minutes in the file; default 5)."""
    preempt_type: str = "preempt/none"
    preempt_mode: str = "OFF"
    preempt_exempt_time_s: int = 0
    kill_wait_s: int = 30
    over_time_limit_s: int = 0
    """`OverTimeLimit` in seconds (None in the file: UNLIMITED, kept as a large number)."""
    scheduler_type: str = "sched/backfill"
    sched_interval_s: int = 60
    bf_interval_s: int = 30
    kill_invalid_depend: bool = False
    partitions: tuple[SitePartition, ...] = ()
    qos: tuple[SiteQos, ...] = ()
    accounts: tuple[SiteAccount, ...] = ()
    sources: tuple[str, ...] = ()
    """The files read."""

    @property
    def preemption(self) -> bool:
        """Whether the site preempts at all."""
        return self.preempt_type != "preempt/none" and self.preempt_mode.upper() != "OFF"

    def protections(self) -> dict[str, int]:
        """gpuledger's own protections as the site has them (policy keys): a minimum runtime
        only as `PreemptExemptTime`; no eviction budget and no aging (Slurm has neither; its
        age factor is a priority weight, `weights['age']`)."""
        return {
            "min_runtime_s": self.preempt_exempt_time_s,
            "eviction_budget_per_hour": 0,
            "aging_after_preemptions": 0,
            "aging_after_wait_s": 0,
        }

    def policy(self, class_of: Callable[[str], str] = str) -> dict[str, object]:
        """The recorded configuration's policy keys the site determines: its protections, and
        the `slurm` queue-order and preemption profile with the site's values (`class_of`:
        a QOS name -> the priority class it was imported as)."""
        return {
            "preemption": self.preemption,
            **self.protections(),
            "dependency_never_satisfied": "cancel" if self.kill_invalid_depend else "pend",
            # a preempted job stops after its partition's GraceTime (REQUEUE: at once)
            "default_grace_s": max(
                (p.grace_time_s for p in self.partitions if self.preemptable(p)), default=0
            ),
            **({"usage_half_life_s": self.priority_decay_half_life_s} if self.multifactor else {}),
            "profile": "slurm",
            "slurm": self.profile(class_of),
        }

    @property
    def backfill(self) -> bool:
        """`SchedulerType=sched/backfill` (Slurm's default); `sched/builtin` has only the
        main scheduler, approximated as backfilling at every pass (no interval)."""
        return self.scheduler_type.strip().lower() in ("", "sched/backfill")

    @property
    def multifactor(self) -> bool:
        return self.priority_type.strip().lower() == "priority/multifactor"

    def preemptable(self, p: SitePartition) -> bool:
        """Whether the partition's jobs may be preempted: its `PreemptMode` (else the
        cluster's) is not `OFF`."""
        mode = p.preempt_mode.split(",")[0].strip() or self.preempt_mode.split(",")[0].strip()
        return mode.upper() not in ("", "OFF")

    def profile(self, class_of: Callable[[str], str] = str) -> dict[str, object]:
        """The `policy.slurm` record (`events.catalog.SlurmPolicy`) of this site."""
        kind = self.preempt_type.strip().lower().removeprefix("preempt/")
        partitions = {
            p.name: {"tier": p.priority_tier, "preemptable": self.preemptable(p)}
            for p in self.partitions
        }
        qos = {
            class_of(q.name): {
                "priority": q.priority,
                "preempt": sorted({class_of(v) for v in q.preempt}),
            }
            for q in self.qos
        }
        default = next((p.name for p in self.partitions if p.default), "")
        return {
            "multifactor": self.multifactor,
            "weights": {k: v for k, v in sorted(self.weights.items()) if k != "assoc"},
            "max_age_s": self.priority_max_age_s,
            "calc_period_s": self.priority_calc_period_s,
            "backfill_interval_s": self.bf_interval_s if self.backfill else 0,
            "preempt": kind if kind in ("partition_prio", "qos") else "none",
            "partitions": partitions,
            "default_partition": default,
            "qos": qos,
        }

    def tenant_weights(self, tenant_of: Callable[[str], str] = str) -> dict[str, int]:
        """Accounts' fair-share shares as tenant weights (`parent`: the parent's shares)."""
        by_name = {a.name: a for a in self.accounts}
        out: dict[str, int] = {}
        for a in self.accounts:
            acct, seen = a, set()
            while acct.shares is None and acct.parent in by_name and acct.name not in seen:
                seen.add(acct.name)
                acct = by_name[acct.parent]
            out[tenant_of(a.name)] = acct.shares if acct.shares is not None else 1
        return out


_UNLIMITED = {"unlimited", "infinite"}
_TIME = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")
WEIGHTS = ("age", "fairshare", "jobsize", "partition", "qos", "assoc")


def slurm_time_s(text: str, minutes: bool = True) -> int | None:
    """A Slurm time (`MaxTime` and the like: `90` minutes, `MM:SS`, `HH:MM:SS`, `D-HH`,
    `D-HH:MM`, `D-HH:MM:SS`; `UNLIMITED` / `INFINITE`: None) in seconds; a bare number is
    minutes, or seconds with `minutes=False`. ValueError when unreadable."""
    t = text.strip()
    if t.lower() in _UNLIMITED:
        return None
    m = _TIME.match(t)
    if m is None:
        raise ValueError(f"not a time: {text!r}")
    d, a, b, c = m.groups()
    days = int(d or 0) * 86_400
    if d is not None:  # D-HH[:MM[:SS]]
        return days + int(a) * 3600 + int(b or 0) * 60 + int(c or 0)
    if c is not None:  # HH:MM:SS
        return int(a) * 3600 + int(b) * 60 + int(c)
    if b is not None:  # MM:SS
        return int(a) * 60 + int(b)
    return int(a) * (60 if minutes else 1)


class _Lines:
    """`file:line` errors for one site file."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        try:
            self.text = Path(path).read_text()
        except OSError as exc:
            raise SiteConfigError(f"{path}: {exc.strerror or exc}") from None
        except UnicodeDecodeError:
            raise SiteConfigError(f"{path}: not a text file") from None

    def error(self, line: int, message: str) -> SiteConfigError:
        return SiteConfigError(f"{self.path}:{line}: {message}")


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """(first line number, text) of each logical line: comments dropped, `\\` continued."""
    out: list[tuple[int, str]] = []
    pending, start = "", 0
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].rstrip()
        if not pending:
            start = n
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = (pending + line).strip()
        pending = ""
        if line:
            out.append((start, line))
    if pending.strip():
        out.append((start, pending.strip()))
    return out


def _pairs(text: str) -> list[tuple[str, str]]:
    """`Key=Value Key2="a b"` -> [(key lowercased, value)]."""
    out = []
    for m in re.finditer(r'(\S+?)=("[^"]*"|\S*)', text):
        out.append((m.group(1).lower(), m.group(2).strip('"')))
    return out


def read_slurm_conf(path: str | Path) -> dict[str, object]:
    """The fields of `SitePolicy` that slurm.conf gives (a dict for `msgspec.convert`)."""
    src = _Lines(path)
    out: dict[str, object] = {"weights": {}}
    partitions: list[SitePartition] = []
    defaults: dict[str, str] = {}
    for n, line in _logical_lines(src.text):
        pairs = _pairs(line)
        if not pairs:
            continue
        first, name = pairs[0]
        if first == "partitionname":
            fields = dict(pairs[1:])
            if name.upper() == "DEFAULT":
                defaults.update(fields)
            else:
                partitions.append(_partition(src, n, name, {**defaults, **fields}))
        elif first not in ("nodename", "include"):
            for key, value in pairs:
                _setting(src, n, key, value, out)
    out["partitions"] = partitions
    return out


def _integer(src: _Lines, n: int, key: str, value: str) -> int:
    if not re.fullmatch(r"-?\d+", value.strip()):
        raise src.error(n, f"{key}: expected a whole number, got {value!r}")
    return int(value)


def _duration(src: _Lines, n: int, key: str, value: str) -> int | None:
    try:
        return slurm_time_s(value)
    except ValueError:
        raise src.error(
            n, f"{key}: expected a time (minutes, [D-]HH:MM:SS, UNLIMITED), got {value!r}"
        ) from None


_NAMES = {
    "prioritytype": "priority_type",
    "preempttype": "preempt_type",
    "preemptmode": "preempt_mode",
    "schedulertype": "scheduler_type",
}
_DURATIONS = {
    "prioritymaxage": ("PriorityMaxAge", "priority_max_age_s"),
    "prioritydecayhalflife": ("PriorityDecayHalfLife", "priority_decay_half_life_s"),
    "preemptexempttime": ("PreemptExemptTime", "preempt_exempt_time_s"),
    "prioritycalcperiod": ("PriorityCalcPeriod", "priority_calc_period_s"),
}


def _setting(src: _Lines, n: int, key: str, value: str, out: dict) -> None:
    """One `Key=Value` of slurm.conf into `out` (keys this module does not read: ignored)."""
    if key.startswith("priorityweight"):
        factor = key.removeprefix("priorityweight")
        if factor in WEIGHTS:
            out["weights"][factor] = _integer(src, n, f"PriorityWeight{factor}", value)
    elif key in _NAMES:
        out[_NAMES[key]] = value
    elif key in _DURATIONS:  # UNLIMITED / -1: none
        label, field = _DURATIONS[key]
        out[field] = 0 if value.strip() == "-1" else (_duration(src, n, label, value) or 0)
    elif key == "killwait":
        out["kill_wait_s"] = _integer(src, n, "KillWait", value)
    elif key == "overtimelimit":
        t = _duration(src, n, "OverTimeLimit", value)
        out["over_time_limit_s"] = 365 * 86_400 if t is None else t
    elif key == "schedulerparameters":
        for item in value.split(","):
            k, _, v = item.strip().partition("=")
            if k.lower() in ("sched_interval", "bf_interval"):
                out[f"{k.lower()}_s"] = _integer(src, n, f"SchedulerParameters {k}", v)
            elif k.lower() == "kill_invalid_depend":
                out["kill_invalid_depend"] = True


def _partition(src: _Lines, n: int, name: str, fields: dict[str, str]) -> SitePartition:
    nodes_text = fields.get("nodes", "")
    every = nodes_text.strip().upper() == "ALL"
    max_time = fields.get("maxtime")
    grace = fields.get("gracetime")
    return SitePartition(
        name=name,
        nodes=() if every else expand_nodelist(nodes_text),
        all_nodes=every,
        priority_tier=_integer(src, n, "PriorityTier", fields.get("prioritytier", "1")),
        preempt_mode=fields.get("preemptmode", ""),
        max_time_s=None if max_time is None else _duration(src, n, "MaxTime", max_time),
        grace_time_s=0 if grace is None else _integer(src, n, "GraceTime", grace),
        default=fields.get("default", "no").upper() == "YES",
    )


def _table(src: _Lines) -> tuple[list[str], list[tuple[int, dict[str, str]]]]:
    """A `sacctmgr ... -P` table: its header and its rows by line."""
    lines = src.text.splitlines()
    if not lines or "|" not in lines[0]:
        raise src.error(1, "not a `sacctmgr ... -P` table (no `|`-separated header)")
    header = lines[0].split("|")
    rows = []
    for n, text in enumerate(lines[1:], 2):
        if not text.strip():
            continue
        values = text.split("|")
        if len(values) != len(header):
            raise src.error(n, f"{len(values)} fields, header has {len(header)}")
        rows.append((n, dict(zip(header, values, strict=True))))
    return header, rows


def read_qos(path: str | Path) -> list[SiteQos]:
    """`sacctmgr show qos -P`."""
    src = _Lines(path)
    header, rows = _table(src)
    if "Name" not in header:
        raise src.error(1, "no `Name` column")
    out = []
    for n, r in rows:
        prio = (r.get("Priority") or "0").strip() or "0"
        if not re.fullmatch(r"\d+", prio):
            raise src.error(n, f"Priority: expected a whole number, got {prio!r}")
        try:
            exempt = r.get("PreemptExemptTime", "").strip()
            grace = r.get("GraceTime", "").strip()
            out.append(
                SiteQos(
                    name=r["Name"].strip(),
                    priority=int(prio),
                    preempt=tuple(q for q in (r.get("Preempt") or "").split(",") if q.strip()),
                    preempt_mode=(r.get("PreemptMode") or "").strip(),
                    preempt_exempt_time_s=slurm_time_s(exempt) if exempt else None,
                    grace_time_s=(slurm_time_s(grace, minutes=False) or 0) if grace else 0,
                )
            )
        except ValueError as exc:
            raise src.error(n, str(exc)) from None
    return out


def read_assoc(path: str | Path) -> list[SiteAccount]:
    """The accounts of `sacctmgr show assoc -P` (rows without a user), with their shares."""
    src = _Lines(path)
    header, rows = _table(src)
    share_col = next((c for c in ("Share", "Fairshare", "Shares") if c in header), None)
    if "Account" not in header or share_col is None:
        raise src.error(1, "expected `Account` and `Share` columns")
    out: dict[str, SiteAccount] = {}
    for n, r in rows:
        if (r.get("User") or "").strip() or (r.get("Partition") or "").strip():
            continue  # a user's or a partition's association: not an account's own
        name = r["Account"].strip()
        raw = r[share_col].strip()
        if raw.lower() == "parent":
            shares = None
        elif re.fullmatch(r"\d+", raw):
            shares = int(raw)
        else:
            raise src.error(n, f"{share_col}: expected a whole number or `parent`, got {raw!r}")
        parent = (r.get("ParentName") or r.get("Par Name") or "").strip()
        out.setdefault(name, SiteAccount(name=name, parent=parent, shares=shares))
    return list(out.values())


def read_site(
    slurm_conf: str | Path | None, qos: str | Path | None, assoc: str | Path | None
) -> SitePolicy | None:
    """The site's policy from whichever of the three files are given (None: none given)."""
    if slurm_conf is None and qos is None and assoc is None:
        return None
    fields: dict[str, object] = {}
    if slurm_conf is not None:
        fields.update(read_slurm_conf(slurm_conf))
    if qos is not None:
        fields["qos"] = read_qos(qos)
    if assoc is not None:
        fields["accounts"] = read_assoc(assoc)
    fields["sources"] = tuple(str(p) for p in (slurm_conf, qos, assoc) if p is not None)
    return msgspec.convert(fields, SitePolicy, from_attributes=True)


def site_sidecar(log: str | Path) -> Path:
    """`OUT.jsonl` -> `OUT.site.json`."""
    p = Path(log)
    return p.with_name(p.name.rsplit(".", 1)[0] + ".site.json")


def write_site(log: str | Path, site: SitePolicy) -> Path:
    path = site_sidecar(log)
    path.write_bytes(msgspec.json.format(msgspec.json.encode(site), indent=2) + b"\n")
    return path
