"""The coordinator's VM life (vm_life.py): it polls fast while its first VMs boot (a worker's
key request and ready status are on the first job's way), and at its own poll once one is
ready. The real coordinator, round by round (tests/coordinator_rig.py)."""

from __future__ import annotations

from pathlib import Path

from expo_executor.coordinator.vm_life import FIRST_BOOT_POLL_S

from tests.coordinator_rig import Rig


def test_the_poll_is_fast_only_until_the_first_vm_is_ready(tmp_path: Path) -> None:
    rig = Rig(tmp_path, workers=2)
    rig.config.poll = 2.0  # GCE's default
    assert rig.coordinator.poll_now() == 2.0  # no VM yet: nothing to wait for
    rig.submit("a", "b")
    rig.round()
    assert len(rig.coordinator.vms) == 2, rig.lines
    assert rig.coordinator.poll_now() == FIRST_BOOT_POLL_S < 2.0
    rig.ready("w-1")
    rig.round()
    assert rig.coordinator.vms.ready_count() == 1
    assert rig.coordinator.poll_now() == 2.0  # w-2 still boots: the first VM is up
