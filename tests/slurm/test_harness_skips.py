"""Where the real-Slurm harness cannot run, it says precisely which part and why (the slurm
tests skip with that sentence); these checks need no Slurm and run everywhere."""

from __future__ import annotations

import errno
import os
import shutil

import pytest

from tests.slurm import realslurm
from tests.slurm.realslurm import RealSlurm, SlurmUnavailable


@pytest.fixture
def all_installed(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/sbin/{name}")
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(os, "mknod", lambda *a, **k: None)


def test_a_missing_binary_is_named_with_the_packages_to_install(all_installed, monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None if name == "slurmdbd" else name)
    reason = RealSlurm.unavailable()
    assert reason is not None
    assert "slurmdbd not installed" in reason
    assert realslurm.PACKAGES in reason and "slurmctld" not in reason


def test_not_root_is_named_with_the_uid(all_installed, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    reason = RealSlurm.unavailable()
    assert reason is not None and "needs root" in reason and "uid 1000" in reason


def test_refused_mknod_is_named(all_installed, monkeypatch):
    def refuse(*a, **k):
        raise PermissionError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "mknod", refuse)
    reason = RealSlurm.unavailable()
    assert reason is not None
    assert "mknod" in reason and "Operation not permitted" in reason and "File=" in reason


def test_start_refuses_with_the_reason_and_leaves_nothing(all_installed, monkeypatch, tmp_path):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    s = RealSlurm(root=tmp_path / "cluster")
    with pytest.raises(SlurmUnavailable, match="needs root"):
        s.start()
    assert not (tmp_path / "cluster").exists() and not s.daemons


def test_everything_present_is_no_reason(all_installed):
    assert RealSlurm.unavailable() is None
