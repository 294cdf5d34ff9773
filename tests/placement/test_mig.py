"""MIG profile names per model family, layout validity and slot choice."""

import pytest

from gpuledger.services.placement.mig import PROFILES, MigSlots, best_start, family, profile_for


def test_names_resolve_per_family():
    assert profile_for("H100", "1g.10gb").profile_id == 19
    assert profile_for("A100-40GB", "1g.10gb").profile_id == 15
    assert profile_for("NVIDIA A100-SXM4-80GB", "3g.40gb").memory_slices == 4
    assert profile_for("H200", "7g.141gb").compute_slices == 7
    assert profile_for("T4", "1g.10gb") is None
    assert profile_for("H100", "3g.71gb") is None
    assert family("NVIDIA H100 80GB HBM3") == "H100-80GB"


@pytest.mark.parametrize(
    "layout",
    [
        [("4g.40gb", 0), ("2g.20gb", 4), ("1g.10gb", 6)],
        [("3g.40gb", 0), ("2g.20gb", 4), ("1g.10gb", 6)],
        [("2g.20gb", 0), ("2g.20gb", 2), ("2g.20gb", 4), ("1g.10gb", 6)],
        [("1g.10gb", s) for s in range(7)],
    ],
)
def test_documented_full_layouts_are_valid(layout):
    slots = MigSlots()
    for name, start in layout:
        slots = slots.with_instance(profile_for("H100", name), start)
    assert slots.compute <= 7
    # the layout is full: no further instance fits anywhere
    assert not any(slots.fits(p, s) for p in PROFILES["H100-80GB"].values() for s in p.starts)


def test_invalid_starts_overlap_compute_and_me_rules():
    h = PROFILES["H100-80GB"]
    assert not MigSlots().fits(h["3g.40gb"], 2)  # valid starts are 0 and 4
    s = MigSlots().with_instance(h["3g.40gb"], 0)
    assert not s.fits(h["2g.20gb"], 2)  # overlaps [0, 4)
    s = MigSlots().with_instance(h["4g.40gb"], 0)
    assert s.fits(h["3g.40gb"], 4)  # 4 + 3 = 7 compute slices, memory [4, 8) free
    assert not s.with_instance(h["3g.40gb"], 4).fits(h["1g.10gb"], 6)  # memory full
    assert (
        not s.with_instance(h["2g.20gb"], 4)
        .with_instance(h["1g.10gb"], 6)
        .fits(h["1g.10gb"], 7 - 1)
    )  # slice 6 taken
    s2 = MigSlots().with_instance(h["3g.40gb"], 0).with_instance(h["3g.40gb"], 4)
    assert s2.compute == 6 and s2.mask == 0xFF
    me = MigSlots().with_instance(h["1g.10gb+me"], 0)
    assert not me.fits(h["1g.10gb+me"], 1)
    assert me.fits(h["1g.10gb"], 1)
    with pytest.raises(ValueError):
        MigSlots().without_instance(h["1g.10gb"], 0)


def test_compute_limit_binds_before_memory():
    h = PROFILES["H100-80GB"]
    s = MigSlots()
    for start in (0, 2, 4):
        s = s.with_instance(h["2g.20gb"], start)
    s = s.with_instance(h["1g.10gb"], 6)  # 7 compute slices used, slice 7 still free
    assert s.compute == 7 and s.free_memory_slices == 1
    assert not any(s.fits(h["1g.10gb"], x) for x in range(7))


def test_best_start_keeps_room_for_large_profiles():
    h = PROFILES["H100-80GB"]
    assert best_start(MigSlots(), h["1g.10gb"], "H100") == 6
    assert best_start(MigSlots(), h["3g.40gb"], "H100") == 4  # keeps 4g@0 possible
    full = MigSlots().with_instance(h["7g.80gb"], 0)
    assert best_start(full, h["1g.10gb"], "H100") is None
    assert best_start(MigSlots(), h["3g.40gb"], "H100", allowed=(0,)) == 0
