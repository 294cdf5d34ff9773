"""Slurm reservations of a Slurm import (`gpuledger import slurm --reservations FILE`): the
output of `scontrol show reservation` (records of `Key=Value` fields, each starting at
`ReservationName=`, spread over indented lines or one per line with `--oneliner`).

- a reservation with `MAINT` in its `Flags` is a maintenance window (`MaintenanceScheduled`,
  scheduled at the trace's first event): its name, `Nodes` (a host list, or `ALL`),
  `StartTime`, `EndTime` (the cluster's local time, like sacct's: `--timezone`);
- any other reservation holds its nodes for its `Accounts` (or `Users`): a window held for
  one tenant (`MaintenanceScheduled` with `tenant`), the tenant its jobs import as (the
  mapping's `tenant_from` and `tenants`); one held for several tenants, for everyone but
  some (`Accounts=-a`), or for users when tenants are accounts is skipped with that reason;
- a record without a readable name, times or nodes, a name that is not a subject token,
  a node the inventory does not hold (left out of the window; a window left with none is
  skipped) and a window overlapping an earlier one on a shared node (the fold keeps one at
  a time) are skipped lines, each with its line number and reason.

Invariant: the windows are returned in file order, each accepted by the nodes fold
(`fold/maintenance.problem`): known nodes, end after start, unique id, no overlap.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from zoneinfo import ZoneInfo

from gpuledger import events as ev
from gpuledger.replay.importers.common import SkipLog, open_text
from gpuledger.replay.importers.slurm_sacct import expand_nodelist, parse_time
from gpuledger.services.domain.tooling.stamp import stamp

NULL = ("", "(null)")


@dataclass(frozen=True)
class Reservation:
    """One `scontrol show reservation` record, read."""

    line: int
    name: str
    start_ms: int
    end_ms: int
    nodes: tuple[str, ...]
    """Expanded host list; `("ALL",)` for every node."""
    flags: frozenset[str]
    accounts: tuple[str, ...]
    users: tuple[str, ...]

    @property
    def maint(self) -> bool:
        return "MAINT" in self.flags


@dataclass
class Reservations:
    """The records of one file and the lines it could not read."""

    path: str
    records: list[Reservation] = field(default_factory=list)
    unread: list[tuple[int, str]] = field(default_factory=list)
    tenants: dict[int, str] = field(default_factory=dict)
    """Per line of a reservation without MAINT: the tenant it holds its nodes for (a line
    not here: `refused` says why)."""
    refused: dict[int, str] = field(default_factory=dict)
    windows: int = 0
    tenant_windows: int = 0

    def hold_for(self, tenant_from: str, tenant_for: Callable[[str], str]) -> None:
        """Name the tenant of each reservation without MAINT, as its jobs' tenants are
        named (`tenant_from`: `account`, `user`, `account/user` or `partition`;
        `tenant_for`: an owner -> its tenant). Called before the import's configuration
        is written, so that the tenant is in it."""
        for r in self.records:
            if r.maint:
                continue
            need = {
                "account": (r.accounts,),
                "user": (r.users,),
                "account/user": (r.accounts, r.users),
            }.get(tenant_from)
            if need is None or any(len(x) != 1 or x[0].startswith("-") for x in need):
                self.refused[r.line] = (
                    f"reservation without MAINT held for {_holders(r)}: a window is held for"
                    f" one tenant (tenants from {tenant_from})"
                )
                continue
            self.tenants[r.line] = tenant_for("/".join(x[0] for x in need))

    def where(self, line: int) -> str:
        return f"{self.path}:{line}"

    def events(self, known: list[str], producer: str, at_ms: int, skips: SkipLog) -> list[ev.Event]:
        """The maintenance windows, scheduled at `at_ms`, of the nodes in `known`; every
        record not imported is a skip with its line."""
        for line, reason in self.unread:
            skips.skip(self.where(line), reason)
        out: list[ev.Event] = []
        taken: list[Reservation] = []
        inventory = set(known)
        for r in self.records:
            tenant = None if r.maint else self.tenants.get(r.line)
            if not r.maint and tenant is None:
                skips.skip(self.where(r.line), self.refused.get(r.line, "no tenant named"))
                continue
            every = r.nodes == ("ALL",)
            nodes = list(known) if every else [n for n in r.nodes if n in inventory]
            missing = [] if every else [n for n in r.nodes if n not in inventory]
            if missing:
                skips.skip(
                    self.where(r.line),
                    f"reservation {r.name}: node {', '.join(missing)} not in the node inventory"
                    + ("" if nodes else " (no node left: not imported)"),
                )
            if not nodes:
                continue
            clash = next(
                (
                    (t, sorted(set(t.nodes) & set(nodes)))
                    for t in taken
                    if set(t.nodes) & set(nodes) and t.start_ms < r.end_ms and r.start_ms < t.end_ms
                ),
                None,
            )
            if clash is not None or any(t.name == r.name for t in taken):
                why = f"overlaps {clash[0].name} on {', '.join(clash[1])}" if clash else "twice"
                skips.skip(self.where(r.line), f"reservation {r.name} {why}: not imported")
                continue
            taken.append(
                Reservation(r.line, r.name, r.start_ms, r.end_ms, tuple(nodes), r.flags, (), ())
            )
            held = {} if tenant is None else {"tenant": tenant}
            self.tenant_windows += tenant is not None
            out.append(
                stamp(
                    ev.MaintenanceScheduled,
                    key=f"{r.name}@{at_ms}",
                    producer=producer,
                    now_ms=at_ms,
                    correlation_id=r.name,
                    window_id=r.name,
                    nodes=tuple(nodes),
                    start_ms=r.start_ms,
                    end_ms=r.end_ms,
                    reason=f"Slurm reservation {r.name} (Flags={','.join(sorted(r.flags))})",
                    **held,
                )
            )
        self.windows = len(out) - self.tenant_windows
        return out

    def summary(self) -> dict[str, int]:
        return {"maintenance_windows": self.windows, "tenant_windows": self.tenant_windows}


def fields_of(text: str) -> dict[str, str]:
    """`Key=Value` fields of a record's text; a word without `=` continues the value before
    it (`Comment=two words`)."""
    out: dict[str, str] = {}
    last = None
    for word in text.split():
        key, sep, value = word.partition("=")
        if sep and key and key[0].isalpha():
            out[key] = value
            last = key
        elif last is not None:
            out[last] += " " + word
    return out


def read_reservations(path: str | Path, tz: ZoneInfo) -> Reservations:
    """Every record of `scontrol show reservation` output (multi-line or `--oneliner`)."""
    out = Reservations(str(path))
    f = open_text(path)
    records: list[tuple[int, list[str]]] = []
    with f:
        for line, text in enumerate(f, 1):
            if text.lstrip().startswith("ReservationName="):
                records.append((line, [text]))
            elif records and text.strip():
                records[-1][1].append(text)
            elif text.strip() and not text.strip().startswith("No reservations"):
                out.unread.append((line, "not part of a reservation record (ReservationName=)"))
    for line, lines in records:
        record = _record(line, fields_of(" ".join(lines)), tz)
        if isinstance(record, str):
            out.unread.append((line, record))
        else:
            out.records.append(record)
    return out


def _record(line: int, f: dict[str, str], tz: ZoneInfo) -> Reservation | str:
    """One record, or why it cannot be read."""
    name = f.get("ReservationName", "")
    try:
        ev.validate_token("reservation", name)
    except ev.InvalidId as exc:
        return f"cannot read reservation name: {exc}"
    try:
        start, end = parse_time(f.get("StartTime", ""), tz), parse_time(f.get("EndTime", ""), tz)
    except ValueError as exc:
        return f"reservation {name}: cannot read a time: {exc}"
    if start is None or end is None or end <= start:
        return f"reservation {name}: no StartTime / EndTime, or it ends before it starts"
    raw = f.get("Nodes", "").strip()
    nodes = ("ALL",) if raw.upper() == "ALL" else expand_nodelist("" if raw in NULL else raw)
    if not nodes:
        return f"reservation {name}: names no node (Nodes={raw or '(null)'})"
    flags = frozenset(x.strip().upper() for x in f.get("Flags", "").split(",") if x.strip())
    accounts, users = (_names(f.get(k, "")) for k in ("Accounts", "Users"))
    return Reservation(line, name, start, end, nodes, flags, accounts, users)


def _names(text: str) -> tuple[str, ...]:
    return () if text.strip() in NULL else tuple(x.strip() for x in text.split(",") if x.strip())


def _holders(r: Reservation) -> str:
    held = [f"Accounts={','.join(r.accounts)}"] if r.accounts else []
    held += [f"Users={','.join(r.users)}"] if r.users else []
    return " ".join(held) or "no account or user"
