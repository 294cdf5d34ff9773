"""Node states of a Slurm import (`gpuledger import slurm --node-states`): the state column
of the sinfo dump, `sinfo --Node --noheader --format='%N|%c|%m|%G|%P|%T'` (`%T`, long:
`drained`; `%t`, compact: `drain`; the sixth column, after the partition).

sinfo is a snapshot at export time, not history, so the states are read only when asked
(docs/importers.md, "Node states"). Then, from the trace's first event, a node Slurm shows

- DRAINED / DRAINING / DRAIN / DRNG, or FAIL / FAILING (out of service at the
  administrator's request) is `drained`: `NodeCordoned` with `drain`;
- DOWN, FUTURE or INVAL (unusable), or any state with the `*` suffix (not responding: Slurm
  gives it no new work) is `down`: `NodeCordoned` with `drain` and `force`;
- anything else Slurm documents (idle, mixed, allocated, completing, reserved, maint,
  planned, power saving, reboot; suffixes `~ # ! % $ @ ^ - +`, which change nothing about
  whether it takes work) takes work: nothing is imported for it.

A state this module cannot read is a skipped line (the node takes work), never silent.
Invariant: one state per node (the first line's; a node listed once per partition has the
same state on every line).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from gpuledger import events as ev
from gpuledger.replay.importers.common import SkipLog, TraceImportError, open_text
from gpuledger.services.domain.tooling.stamp import stamp

SUFFIXES = "*~#!%$@^-+"
"""sinfo(1) NODE STATE CODES: the flag characters after a state."""

DRAINED = frozenset({"drained", "draining", "drain", "drng", "fail", "failing", "failg"})
DOWN = frozenset({"down", "future", "futr", "inval"})
UP = frozenset(
    {
        "idle",
        "mixed",
        "mix",
        "allocated",
        "alloc",
        "completing",
        "comp",
        "reserved",
        "resv",
        "maint",
        "planned",
        "plnd",
        "perfctrs",
        "npc",
        "blocked",
        "unknown",
        "unk",
        "cloud",
        "boot",
        "reboot",
        "reboot_issued",
        "reboot_requested",
        "power_down",
        "pow_dn",
        "powered_down",
        "powering_down",
        "powering_up",
        "pow_up",
    }
)


def classify(text: str) -> str | None:
    """`drained`, `down` or `up` for one sinfo state (`drained*`, `mix-`, `idle+drain`);
    None when it is not a state Slurm documents."""
    raw = text.strip().lower()
    word = raw.rstrip(SUFFIXES)
    parts = [p for p in word.split("+") if p]
    if not parts or any(p not in DRAINED | DOWN | UP for p in parts):
        return None
    if any(p in DOWN for p in parts) or "*" in raw[len(word) :]:
        return "down"
    return "drained" if any(p in DRAINED for p in parts) else "up"


@dataclass
class NodeStates:
    """The nodes sinfo shows out of service, and its lines it could not read."""

    path: str
    kinds: dict[str, tuple[str, str]] = field(default_factory=dict)
    """node -> (`drained` or `down`, the state as sinfo printed it)."""
    unread: list[tuple[int, str]] = field(default_factory=list)
    """(line, reason) of each state it could not read."""

    def events(self, known: set[str], producer: str, at_ms: int, skips: SkipLog) -> list[ev.Event]:
        """The cordons at `at_ms`, in file order, of the nodes the inventory holds."""
        for line, reason in self.unread:
            skips.skip(f"{self.path}:{line}", reason)
        return [
            stamp(
                ev.NodeCordoned,
                key=f"{node}@{at_ms}",
                producer=producer,
                now_ms=at_ms,
                correlation_id=node,
                node=node,
                reason=f"Slurm {state} (sinfo at export)",
                drain=True,
                force=kind == "down",
            )
            for node, (kind, state) in self.kinds.items()
            if node in known
        ]

    def summary(self) -> dict[str, int]:
        kinds = [k for k, _ in self.kinds.values()]
        return {"nodes_drained": kinds.count("drained"), "nodes_down": kinds.count("down")}


def read_node_states(path: str | Path) -> NodeStates:
    """The state column of a sinfo dump (`slurm_nodes.read_sinfo` reads the rest and has
    checked every line's other columns)."""
    out = NodeStates(str(path))
    seen: set[str] = set()
    columns = False
    f = open_text(path)
    with f:
        for line, text in enumerate(f, 1):
            parts = [p.strip() for p in text.strip().split("|")]
            if len(parts) < 4 or parts[0].upper() in ("NODELIST", "HOSTNAMES", "NODE_NAME"):
                continue
            if parts[0] in seen:
                continue
            seen.add(parts[0])
            state = parts[5] if len(parts) > 5 else ""
            columns = columns or len(parts) > 5
            kind = classify(state) if state else None
            if kind is None:
                what = f"cannot read node state {state!r}" if state else "no state column"
                out.unread.append((line, f"{what} (--node-states: %T, sixth column)"))
            elif kind != "up":
                out.kinds[parts[0]] = (kind, state)
    if seen and not columns:
        raise TraceImportError(
            f"{path}: --node-states: no state column; export it with"
            " sinfo --Node --noheader --format='%N|%c|%m|%G|%P|%T'"
        )
    return out
