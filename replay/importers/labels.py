"""Node labels and job node selectors as importers derive them from their sources.

Slurm partitions: `sinfo --Node` lists a node once per partition it is in (`%P`, the default
partition marked `*`). A partition whose nodes are in no other partition labels them
`partition=<name>`; a partition sharing a node with another (overlapping partitions, common
for preemptible or debug partitions over the same hardware) labels each of its nodes
`partition.<name>=true` instead, since one key holds one value. A job's `Partition` selects
the same label (`{partition: a100}` or `{partition.debug: "true"}`), so its members go only to
that partition's nodes. A node file (`--nodes`) may carry either form in `labels:`.

A job whose partition no node is in (sinfo taken at another time), or that names several
(`gpu,gpu-long`: a pending job submitted to either) gets no selector; the import summary
counts them (`partition_unmatched`).
"""

from __future__ import annotations

from collections.abc import Iterable

from gpuledger import events as ev

PARTITION = "partition"


def partition_labels(members: dict[str, list[str]]) -> dict[str, dict[str, str]]:
    """Node -> its partition labels, from node -> the partitions it is listed in."""
    shared = {p for parts in members.values() if len(set(parts)) > 1 for p in parts}
    out: dict[str, dict[str, str]] = {}
    for node, parts in members.items():
        labels: dict[str, str] = {}
        for p in sorted(set(parts)):
            if p in shared:
                labels[f"{PARTITION}.{p}"] = "true"
            else:
                labels[PARTITION] = p
        out[node] = labels
    return out


def partition_selectors(nodes: Iterable[ev.NodeInfo]) -> dict[str, dict[str, str]]:
    """Partition name -> the node selector of its jobs, from the nodes' partition labels."""
    out: dict[str, dict[str, str]] = {}
    for n in nodes:
        for k, v in n.labels.items():
            if k == PARTITION:
                out[v] = {PARTITION: v}
            elif k.startswith(PARTITION + ".") and v == "true":
                out[k.split(".", 1)[1]] = {k: "true"}
    return dict(sorted(out.items()))


class PartitionSelectors:
    """A job's source partition -> its node selector (None: any node), counting the jobs
    left unselected because no node is in their partition or they name several."""

    def __init__(self, nodes: Iterable[ev.NodeInfo]) -> None:
        self.selectors = partition_selectors(nodes)
        self.unmatched: dict[str, int] = {}

    def __call__(self, partition: str) -> dict[str, str] | None:
        name = partition.strip()
        if not name or not self.selectors:
            return None
        found = self.selectors.get(name)
        if found is None:
            self.unmatched[name] = self.unmatched.get(name, 0) + 1
        return found

    def summary(self) -> dict[str, int]:
        """`{partition_unmatched: N}` when some job's partition had no node (else empty)."""
        n = sum(self.unmatched.values())
        return {"partition_unmatched": n} if n else {}


def pod_selector(spec: dict) -> tuple[dict[str, str], bool]:
    """A pod's node selector: `spec.nodeSelector` plus its required node affinity, and whether
    part of the affinity was left out (the subset below). Supported: one
    `nodeSelectorTerms` entry whose `matchExpressions` use `In` with exactly one value (each
    becomes `key=value`). Several terms (OR), `In` with several values, `NotIn`, `Exists`,
    `DoesNotExist`, `Gt`, `Lt` and `matchFields` are left out (the pod may then go to more
    nodes than on the cluster), and so is an `In` naming another value for a key that
    `nodeSelector` already sets."""
    selector = {str(k): str(v) for k, v in sorted(((spec or {}).get("nodeSelector") or {}).items())}
    affinity = ((spec or {}).get("affinity") or {}).get("nodeAffinity") or {}
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    terms = required.get("nodeSelectorTerms") or []
    ignored = False
    if len(terms) > 1:
        return selector, True
    for term in terms:
        if term.get("matchFields"):
            ignored = True
        for expr in term.get("matchExpressions") or []:
            values = expr.get("values") or []
            key = str(expr.get("key", ""))
            if expr.get("operator") != "In" or len(values) != 1 or not key:
                ignored = True
            elif selector.get(key, str(values[0])) != str(values[0]):
                ignored = True
            else:
                selector[key] = str(values[0])
    return dict(sorted(selector.items())), ignored


class SelectedKeys:
    """What the pods of an import selected on: the label keys (nodes keep only those labels),
    jobs per selector, and pods whose node affinity was only partly kept."""

    def __init__(self) -> None:
        self.keys: set[str] = set()
        self.jobs: dict[tuple[tuple[str, str], ...], int] = {}
        self.affinity_ignored = 0

    def job(self, selector: dict[str, str] | None) -> None:
        if selector:
            key = tuple(sorted(selector.items()))
            self.jobs[key] = self.jobs.get(key, 0) + 1

    def pod(self, selector: dict[str, str], ignored: bool) -> None:
        self.keys.update(selector)
        self.affinity_ignored += ignored

    def nodes(self, nodes: Iterable[ev.NodeInfo]) -> tuple[ev.NodeInfo, ...]:
        """The nodes with only the labels some pod selects on (sorted by key)."""
        import msgspec

        return tuple(
            msgspec.structs.replace(
                n, labels={k: v for k, v in sorted(n.labels.items()) if k in self.keys}
            )
            for n in nodes
        )

    def summary(self, nodes: Iterable[ev.NodeInfo]) -> dict[str, int]:
        """`node_selector_unmatched` (jobs whose selector no node carries) and
        `node_affinity_ignored` (pods whose required affinity was partly left out), when
        not zero."""
        labels = [set(n.labels.items()) for n in nodes]
        unmatched = sum(
            count for sel, count in self.jobs.items() if not any(set(sel) <= lab for lab in labels)
        )
        out = {}
        if unmatched:
            out["node_selector_unmatched"] = unmatched
        if self.affinity_ignored:
            out["node_affinity_ignored"] = self.affinity_ignored
        return out
