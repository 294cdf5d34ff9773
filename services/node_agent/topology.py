"""NVLink cliques: which GPUs can talk to each other over NVLink.

Pure. On one host a clique is a connected component of the NVLink peer graph, named
``<prefix>-nvl<k>`` where ``k`` is the lowest GPU index in the component (so a name does
not change when another component appears or disappears); a GPU without NVLink peers is a
clique of its own. On multi-node NVLink fabrics the clique is ``<clusterUUID>.<cliqueId>``
(the string NVIDIA's ``nvidia.com/gpu.clique`` node label uses); an all-zero cluster UUID
means "no fabric".
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable


def nvlink_cliques(
    indices: Iterable[int], peers: Iterable[tuple[int, int]], prefix: str
) -> dict[int, str]:
    """Map every GPU index to its host clique name.

    ``peers`` are undirected NVLink peer pairs; pairs naming an index not in ``indices``
    are ignored. Invariant: two GPUs share a name iff a chain of peer pairs joins them.
    """
    nodes = sorted(set(indices))
    parent = {i: i for i in nodes}

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for a, b in peers:
        if a in parent and b in parent:
            ra, rb = root(a), root(b)
            if ra != rb:
                # The lowest index is always the root, so the root names the component.
                parent[max(ra, rb)] = min(ra, rb)
    return {i: f"{prefix}-nvl{root(i)}" for i in nodes}


def fabric_clique(cluster_uuid: bytes, clique_id: int) -> str | None:
    """``<clusterUUID>.<cliqueId>`` for a GPU on a multi-node fabric, None if not on one."""
    if len(cluster_uuid) != 16:
        raise ValueError(f"cluster UUID must be 16 bytes, got {len(cluster_uuid)}")
    if not any(cluster_uuid):
        return None
    return f"{uuid.UUID(bytes=bytes(cluster_uuid))}.{clique_id}"
