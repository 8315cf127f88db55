"""--expocloud-budget end to end, offline: a sweep on the fake Compute Engine with a budget far
too small for it stops growing, drains, and ends within the budget; the cost report's VM time
is what the fake Compute Engine itself recorded."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from expo_executor.cost import prices
from expo_executor.runs.files import RunFiles

from tests.emulated_gce import emulated_args, emulated_env, fake_compute  # noqa: F401
from tests.gcs_emulator import gcs_emulator  # noqa: F401
from tests.helpers import EXPOCLOUD, SNAKEMAKE, job_records, run_dirs, wait_until
from tests.notify_receiver import SECRET, receiver

SWEEP = """
rule all:
    input: expand("out/{i}.txt", i=range(12))

rule nap:
    output: "out/{i}.txt"
    shell: "sleep 10; echo done > {output}"
"""


@pytest.mark.parametrize("action", ["drain", "cancel"])
def test_tiny_budget_stops_growth_and_ends_within_it(tmp_path: Path, action: str,
                                                     fake_compute, gcs_emulator  # noqa: F811
                                                     ) -> None:
    workdir = tmp_path / "wf"
    workdir.mkdir()
    (workdir / "Snakefile").write_text(SWEEP)
    # 100 Spot VM-seconds of e2-standard-2: one VM's paid first minute and 40 s more, while
    # the sweep needs 120 s of one slot. A second VM would need another paid minute: no growth.
    spot_hourly = prices.load("us-central1").hourly("e2-standard-2", spot=True)
    budget = spot_hourly / 3600 * 100
    with receiver() as notified:  # --expocloud-notify: the budget's phases and the run's end
        args = emulated_args(fake_compute, gcs_emulator, None, "--expocloud-budget",
                             f"{budget:.9f}", "--expocloud-max-workers", "3",
                             "--expocloud-gce-machine-type", "e2-standard-2",
                             "--expocloud-budget-action", action, "--keep-going",
                             "--expocloud-notify", notified.url)
        result = subprocess.run([SNAKEMAKE, *args], cwd=workdir, capture_output=True, text=True,
                                timeout=600, env={**emulated_env(gcs_emulator),
                                                  "EXPOCLOUD_NOTIFY_SECRET": SECRET.decode()})
    assert result.returncode != 0, "jobs the budget did not pay for must fail"
    assert f"--expocloud-budget): {'draining' if action == 'drain' else 'cancelling'}" \
        in result.stderr

    run_dir = run_dirs(workdir)[-1]
    records = list(job_records(run_dir).values())
    solved = [r for r in records if r["outcome"] == "solved"]
    unpaid = [r for r in records if r["outcome"] == "failed"]
    assert solved and unpaid and len(solved) + len(unpaid) == 12
    assert all("--expocloud-budget" in r["reason"] for r in unpaid), unpaid
    vms = RunFiles(run_dir).vms()
    assert len(vms) == 1, f"growth should have stopped at one VM: {vms}"

    cost = json.loads((run_dir / "cost.json").read_text())
    assert 0 < cost["cost_usd"] <= budget
    assert cost["prices"].startswith("prices: snapshot")
    assert cost["solved"] == len(solved)
    # the receiver saw the budget's phase changes and the run's end, each signed
    assert all(notified.signed) and notified.events()[-1] == "run_end", notified.bodies
    phases = [body["phase"] for body in notified.of("budget")]
    assert phases and ("limit" if action == "drain" else "stop") in phases, phases
    assert all(body["limit_usd"] == pytest.approx(budget) for body in notified.of("budget"))
    end = notified.of("run_end")[0]
    assert end["counts"] == {"solved": len(solved), "failed": len(unpaid)}
    assert 0 < end["cost_usd"] <= budget and end["budget_usd"] == pytest.approx(budget)
    # The report's VM time against the fake Compute Engine's own ledger (insert to power-off):
    # ours runs from just before the insert call to just after the delete call.
    assert wait_until(lambda: not fake_compute.instances(), timeout=30)
    ledger = fake_compute.ledger()
    fake_seconds = sum(vm["ended"] - vm["inserted"] for vm in ledger)
    assert len(ledger) == 1
    assert abs(cost["vm_hours"] * 3600 - fake_seconds) <= 3.0, (cost, ledger)
    # expocloud report prints the same figures
    report = subprocess.run([EXPOCLOUD, "report", "--state-dir",
                             str(workdir / ".expocloud")], cwd=workdir, capture_output=True,
                            text=True, timeout=120)
    assert report.returncode == 0, report.stderr
    assert f"cost: ${cost['cost_usd']:.4f}" in report.stdout
