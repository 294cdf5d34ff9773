"""NVLink cliques: connected components on a host, cluster UUID + clique id on fabrics."""

import pytest

from gpuledger.services.node_agent.mig import clean_profile_name, profile_name
from gpuledger.services.node_agent.topology import fabric_clique, nvlink_cliques


def test_fully_connected_eight_gpus_form_one_clique_named_by_the_lowest_index():
    pairs = [(a, b) for a in range(8) for b in range(a + 1, 8)]
    assert set(nvlink_cliques(range(8), pairs, "node1").values()) == {"node1-nvl0"}


def test_two_islands_form_two_cliques():
    pairs = [(0, 1), (1, 2), (2, 3), (4, 5), (5, 6), (6, 7)]
    cliques = nvlink_cliques(range(8), pairs, "n")
    assert [cliques[i] for i in range(8)] == ["n-nvl0"] * 4 + ["n-nvl4"] * 4


def test_a_chain_of_peers_is_one_clique_and_isolated_gpus_are_singletons():
    cliques = nvlink_cliques([0, 1, 2, 3], [(3, 1), (1, 2)], "n")
    assert cliques == {0: "n-nvl0", 1: "n-nvl1", 2: "n-nvl1", 3: "n-nvl1"}


def test_peers_naming_unknown_gpus_are_ignored():
    assert nvlink_cliques([0], [(0, 9)], "n") == {0: "n-nvl0"}


def test_fabric_clique_is_cluster_uuid_dot_clique_id():
    cluster = bytes.fromhex("0123456789abcdef0123456789abcdef")
    assert fabric_clique(cluster, 7) == "01234567-89ab-cdef-0123-456789abcdef.7"


def test_an_all_zero_cluster_uuid_means_no_fabric():
    assert fabric_clique(bytes(16), 7) is None


def test_a_cluster_uuid_of_the_wrong_length_is_refused():
    with pytest.raises(ValueError):
        fabric_clique(b"\x01" * 8, 1)


def test_mig_profile_names_follow_the_gpu_model():
    assert profile_name("A100-40GB", 19) == "1g.5gb"
    assert profile_name("H100-80GB", 9) == "3g.40gb"
    assert profile_name("H200-141GB", 0) == "7g.141gb"
    assert profile_name("L4-24GB", 19) is None
    assert clean_profile_name("MIG 1g.5gb") == "1g.5gb"
    assert clean_profile_name("1g.5gb+me") == "1g.5gb+me"
