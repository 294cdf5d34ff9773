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
