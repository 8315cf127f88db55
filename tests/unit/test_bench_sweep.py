"""Issue 31's sweep benchmark's bookkeeping (bench/sweep_scale.py, bench/sweep_workflow.py): the
sweep it generates and the figures it derives from what its proxy saw, not the runs themselves
(those are the benchmark's)."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import sweep_scale  # noqa: E402
import sweep_workflow  # noqa: E402

from expo_executor.emulator.faulty_proxy import Request  # noqa: E402


def test_the_sweep_has_its_points_in_nested_folders(tmp_path: Path) -> None:
    outputs = sweep_workflow.make(tmp_path / "wf", 5000)
    assert len(set(outputs)) == 5000
    assert outputs[0] == "results/0/0/0.txt" and outputs[-1] == "results/9/9/49.txt"
    per_folder = Counter(path.rsplit("/", 1)[0] for path in outputs)
    assert len(per_folder) == 100 and set(per_folder.values()) == {50}
    snakefile = (tmp_path / "wf" / "Snakefile").read_text()
    assert "POINTS = 5000" in snakefile and "S_VALUES = 50" in snakefile


def test_a_sweep_of_points_that_fill_no_whole_folder_keeps_its_count() -> None:
    assert len(sweep_workflow.outputs(250)) == 250
    assert sweep_workflow.outputs(250)[-1] == "results/8/3/0.txt"  # 3 values of s: 249 = 8*30 + 3*3
    with pytest.raises(ValueError, match="at least one point"):
        sweep_workflow.make("unused", 0)


@pytest.mark.parametrize("method, target, kind", [
    ("GET", "/storage/v1/b/b1/o?prefix=wf/results/&maxResults=1000", "list"),
    ("GET", "/storage/v1/b/b1/o/wf/results/1/2/3.txt?fields=name", "metadata"),
    ("GET", "/storage/v1/b/b1/o/wf/results/1/2/3.txt?alt=media", "download"),
    ("GET", "/download/storage/v1/b/b1/o/wf/x?alt=media", "download"),
    ("POST", "/upload/storage/v1/b/b1/o?uploadType=multipart", "upload"),
    ("DELETE", "/storage/v1/b/b1/o/wf/runs/r/inbox", "delete"),
    ("POST", "/batch/storage/v1", "batch"),
    ("GET", "/storage/v1/b/b1", "bucket"),
    ("POST", "/storage/v1/b/b1/o/a/compose", "other write"),
])
def test_storage_calls_are_counted_by_kind(method: str, target: str, kind: str) -> None:
    assert sweep_scale.classify(method, target) == kind


def test_an_upload_names_the_sweep_output_it_stores() -> None:
    multipart = (b'--x\r\ncontent-type: application/json\r\n\r\n'
                 b'{"name": "wf/results/3/4/17.txt"}\r\n--x\r\n\r\n3 4 17\n\r\n--x--')
    assert sweep_scale.uploaded_output(
        Request("POST", "/upload/storage/v1/b/b1/o?uploadType=multipart", multipart)) \
        == "results/3/4/17.txt"
    assert sweep_scale.uploaded_output(
        Request("POST", "/upload/storage/v1/b/b1/o?uploadType=media&name=wf/results/0/1/2.txt",
                b"0 1 2\n")) == "results/0/1/2.txt"
    # a worker's result record mentions the output in its command: not an output's upload
    record = b'{"name": "wf/runs/r/results/w1/3", "argv": ["--target-files results/1/1/1.txt"]}'
    assert sweep_scale.uploaded_output(
        Request("POST", "/upload/storage/v1/b/b1/o?uploadType=multipart", record)) is None
    assert sweep_scale.uploaded_output(
        Request("GET", "/storage/v1/b/b1/o/wf/results/1/1/1.txt", b"")) is None


def test_storage_calls_split_at_the_first_output_and_count_per_job_after_it() -> None:
    calls = [(1.0, "metadata"), (2.0, "metadata"), (3.0, "list"),
             (10.0, "upload"), (11.0, "upload"), (12.0, "list"), (13.0, "upload")]
    figures = sweep_scale.storage_figures(calls, first_output=10.0, jobs=2)
    assert figures["before_first"] == {"metadata": 2, "list": 1}
    assert figures["after_first"] == {"upload": 3, "list": 1}
    assert figures["per_job_after_first"] == 2.0
    nothing_out = sweep_scale.storage_figures(calls, first_output=None, jobs=0)
    assert sum(nothing_out["before_first"].values()) == 7
    assert nothing_out["per_job_after_first"] is None


def test_the_jobs_per_second_of_a_stopped_run_leave_out_its_stop() -> None:
    result = sweep_scale.Result("expocloud", 100, "snakemake", wall_s=60.0, done=51,
                                stopped=True, stop_to_exit_s=10.0, first_output_s=5.0,
                                last_output_s=30.0)
    assert result.jobs_per_s == pytest.approx(51 / 50)
    assert result.steady_jobs_per_s == pytest.approx(50 / 25)


def test_the_page_grids_are_the_sweep_s_own_and_a_cube_that_holds_every_point() -> None:
    own, cube = sweep_scale.page_grids(50_000)
    assert own == (10, 10, 500)
    assert cube == (37, 37, 37) and 37 ** 3 >= 50_000 > 36 ** 3


def test_the_first_job_s_way_is_timed_from_the_run_s_start(tmp_path: Path) -> None:
    run = tmp_path / "wf" / ".expocloud" / "runs" / "20261128-000000-abcd"
    run.mkdir(parents=True)
    (run / "vms.jsonl").write_text(
        '{"name": "a", "created": 100.0, "ready": 103.5}\n'
        '{"name": "b", "created": 100.0, "ready": 102.9}\n'
        '{"name": "c", "created": 104.0, "ready": null}\n')
    (run / "jobs.jsonl").write_text('{"key": "j1", "started": 103.4}\n')
    result = sweep_scale.Result("expocloud, GCE path", 5000, "snakemake")
    result.wrap = {"executor_started_at": 99.0, "first_run_jobs_at": 100.5}
    sweep_scale.milestones(result, tmp_path / "wf", started=95.5)  # the process's start
    assert (result.dag_done_s, result.first_vm_s, result.first_handed_s) == (3.5, 4.5, 5.0)
    assert (result.first_ready_s, result.first_start_s) == pytest.approx((7.4, 7.9))
    (run / "vms.jsonl").write_text('{"name": "a", "created": 100.0, "ready": null}\n')
    sweep_scale.milestones(result, tmp_path / "wf", started=95.5)
    assert result.first_ready_s is None  # no worker ready yet


def test_the_pairs_summary_counts_the_pairs_within_the_target() -> None:
    import first_job_pairs

    rows = [{"dag_s": 4.0, "gce_dag_done_s": 4.0, "first_start_s": s, "first_handed_s": 5.0,
             "ratio": s / 4.0} for s in (7.6, 8.4, 7.8)]
    line = first_job_pairs.summary(rows)[0]
    assert "median 1.95" in line and "range 1.90-2.10" in line and "2 of 3 within 2x" in line
    assert "median 3.8 s (range 3.6-4.4 s)" in line and "handed over" in line
    assert first_job_pairs.summary([{**rows[0], "ratio": None, "first_start_s": None}]) == \
        ["No run started a job."]
