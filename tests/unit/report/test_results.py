"""The results report in process: finding and reading a run directory, the table's rows,
filters, groups and best row, Markdown and CSV. (The outcome map's PNG and whole reports that
draw one: tests/e2e/test_report_outcome_map.py.)"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from expo_executor.core.errors import ExpoError
from expo_executor.core.hardness import HardnessSpec
from expo_executor.report.results import report
from expo_executor.report.rule_hardness import default_group_by, hardness_info
from expo_executor.report.run_reader import ReportError, find_run, load_jobs, read_job_numbers
from expo_executor.report.safe_expr import ExpressionError
from expo_executor.report.safe_expr_compile import compile_expression
from expo_executor.report.table import apply_filter, apply_min_group_size, best_row, build_rows
from expo_executor.report.table_output import to_markdown, write_csv
from expo_executor.report.values import format_value

from tests.recorded_run import DIMS, SPEC, job, make_run, run, write_output  # noqa: F401  (run: the fixture)

def rows_of(run_dir: Path, rule: str | None = None) -> list[dict]:
    info = json.loads((run_dir / "run.json").read_text())
    return build_rows(load_jobs(run_dir), Path(info["workdir"]), rule)


def by_key(rows: list[dict]) -> dict[tuple, dict]:
    return {(row["variant"], row["n_tasks"], row["n_agents"], row["seed"]): row for row in rows}


# --- finding and reading a run ----------------------------------------------------------------------------


def test_find_run_newest_by_created_not_by_name(tmp_path: Path) -> None:
    state = tmp_path / ".expocloud"
    make_run(state, "zzz-old", "2024-01-01T00:00:00+00:00", tmp_path, [])
    newest = make_run(state, "aaa-new", "2024-06-01T00:00:00+00:00", tmp_path, [])
    make_run(state, "mmm-naive", "2024-03-01T00:00:00", tmp_path, [])
    assert find_run(state, None) == newest


def test_find_run_falls_back_to_name_without_created(tmp_path: Path) -> None:
    state = tmp_path / ".expocloud"
    make_run(state, "20240101-a", None, tmp_path, [])
    second = make_run(state, "20240102-b", None, tmp_path, [])
    (state / "runs" / "not-a-run").mkdir()
    assert find_run(state, None) == second


def test_find_run_by_id_prefix_and_path(tmp_path: Path) -> None:
    state = tmp_path / ".expocloud"
    first = make_run(state, "20240101-a", None, tmp_path, [])
    make_run(state, "20240102-b", None, tmp_path, [])
    assert find_run(state, "20240101-a") == first
    assert find_run(state, "20240101") == first
    assert find_run(state, str(first)) == first
    with pytest.raises(ReportError, match=r"2 runs start with '2024'.*20240102-b"):
        find_run(state, "2024")
    with pytest.raises(ReportError, match=r"no run 'nope'") as caught:
        find_run(state, "nope")
    assert isinstance(caught.value, ValueError) and isinstance(caught.value, ExpoError)
    assert "\n" not in str(caught.value) and "fix:" in str(caught.value)


def test_find_run_without_runs_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ReportError, match=r"no runs in .*fix:"):
        find_run(tmp_path / ".expocloud", None)


def test_load_jobs_last_record_wins_in_first_seen_order(run: Path) -> None:  # noqa: F811
    jobs = load_jobs(run)
    assert [job["key"] for job in jobs] == ["j1", "j2", "j3", "j4", "j5", "j6", "j7", "agg"]
    assert jobs[0]["outcome"] == "solved" and jobs[0]["attempt"] == 2  # the retry, not the failure


def test_load_jobs_of_a_run_without_jobs_yet(tmp_path: Path) -> None:
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    assert load_jobs(run_dir) == []
    with pytest.raises(ReportError):
        load_jobs(tmp_path / "missing")


def test_read_job_numbers_json_tsv_csv_and_bad_files(tmp_path: Path) -> None:
    write_output(tmp_path, "a.json", {"cost": 1.5, "ok": False, "name": "x", "list": [1], "d": {}, "n": None})
    write_output(tmp_path, "b.tsv", "\ncost\tname\tempty\n 7 \tbnb\t\n9\tlater\t\n")
    write_output(tmp_path, "c.json", "[1, 2]")
    write_output(tmp_path, "d.json", '{"cost": 1')
    write_output(tmp_path, "e.csv", "cost\n")
    (tmp_path / "f.json").write_bytes(b"\xff\xfe\x00garbage")
    assert read_job_numbers(tmp_path / "a.json") == {"cost": 1.5, "ok": False, "name": "x"}
    assert read_job_numbers(tmp_path / "b.tsv") == {"cost": 7, "name": "bnb"}
    for name in ("c.json", "d.json", "e.csv", "f.json", "missing.json"):
        assert read_job_numbers(tmp_path / name) == {}


# --- rows -------------------------------------------------------------------------------------------------


def test_build_rows_columns_numbers_and_clashes(run: Path) -> None:  # noqa: F811
    rows = rows_of(run)
    assert {row["rule"] for row in rows} == {"solve"}  # the rule with a hardness spec, not 'aggregate'
    table = by_key(rows)
    first = table[("heuristic", "5", "2", "0")]
    assert list(first)[:8] == ["rule", "variant", "n_tasks", "n_agents", "seed", "outcome", "runtime_s", "worker"]
    assert first["n_tasks"] == "5" and first["out_n_tasks"] == 99  # a wildcard is never overwritten
    assert first["outcome"] == "solved" and first["out_outcome"] == "clash"
    assert first["cost"] == 12.5 and first["optimal"] is True and first["note"] == "ok"
    assert "assignment" not in first and "meta" not in first and "nothing" not in first
    assert "unknown_future_field" not in first
    tsv = table[("bnb", "5", "2", "0")]
    assert tsv["cost"] == 8.25 and tsv["solve_seconds"] == 3 and tsv["label"] == "fast"
    assert table[("brute", "7", "3", "1")]["solve_seconds"] == 1e-4
    assert "cost" not in table[("brute", "7", "3", "2")]  # solved, but its output is missing
    assert "cost" not in table[("bnb", "5", "2", "1")]  # a timeout has no numbers


def test_build_rows_other_rule_and_unknown_rule(run: Path) -> None:  # noqa: F811
    rows = rows_of(run, "aggregate")
    assert rows == [{"rule": "aggregate", "outcome": "solved", "runtime_s": 0.1, "worker": None, "total": 3}]
    with pytest.raises(ReportError, match=r"no jobs of rule 'nope'.*solve, aggregate"):
        rows_of(run, "nope")


def test_build_rows_without_hardness_takes_all_rules(tmp_path: Path) -> None:
    jobs = [{"key": "a", "rule": "x", "wildcards": {"outcome": "w"}, "outcome": "failed"},
            {"key": "b", "rule": "y", "wildcards": {}, "outcome": "solved", "outputs": []}]
    rows = build_rows(jobs, tmp_path)
    assert [row["rule"] for row in rows] == ["x", "y"]
    assert rows[0]["wc_outcome"] == "w" and rows[0]["outcome"] == "failed"


# --- filter, groups, best -----------------------------------------------------------------------------------


def test_apply_filter_semantics(run: Path) -> None:  # noqa: F811
    rows = rows_of(run)
    kept = apply_filter(rows, compile_expression("cost < 15 and n_tasks >= 5"))
    assert sorted(row["cost"] for row in kept) == [8.25, 10, 12.5]
    # rows without a cost (timeout, skipped, missing output) have no value and are dropped
    assert len(apply_filter(rows, compile_expression("cost > 0"))) == 4
    # ... unless the other side of an 'or' decides
    kept = apply_filter(rows, compile_expression('cost < 9 or variant == "brute"'))
    assert sorted(row["seed"] for row in kept if row["variant"] == "brute") == ["0", "1", "2"]
    assert [row["cost"] for row in kept if row["variant"] != "brute"] == [8.25]
    assert apply_filter(rows, "n_agents > 2") == [row for row in rows if row["n_agents"] == "3"]
    with pytest.raises(ExpressionError, match=r"unknown name 'cots'"):
        apply_filter(rows, compile_expression("cots < 3"))
    assert apply_filter([], compile_expression("cots < 3")) == []


def group_rows(group: str, outcomes: list[str]) -> list[dict]:
    return [{"rule": "solve", "variant": group, "seed": str(i), "outcome": outcome}
            for i, outcome in enumerate(outcomes)]


def test_min_group_size_counts_solved_rows_only() -> None:
    mostly_timeouts = group_rows("bnb", ["solved", "timeout", "timeout", "skipped"])  # 4 rows, 1 solved
    enough = group_rows("heuristic", ["solved", "solved", "failed"])
    rows = mostly_timeouts + enough
    kept = apply_min_group_size(rows, 2, ["variant"])
    # Counting all rows (the original's defect) would keep 'bnb' (4 >= 2); only 1 is solved, so it goes.
    assert kept == enough
    assert apply_min_group_size(rows, 0, ["variant"]) == rows
    assert apply_min_group_size(rows, 3, ["variant"]) == []
    assert apply_min_group_size(rows, 3, []) == rows  # one group of everything: 3 solved
    with pytest.raises(ReportError, match=r"unknown column 'varaint'"):
        apply_min_group_size(rows, 2, ["varaint"])


def test_min_group_size_treats_numeric_strings_and_numbers_alike() -> None:
    rows = [{"n": "7", "outcome": "solved"}, {"n": 7, "outcome": "solved"}, {"n": "8", "outcome": "solved"}]
    assert apply_min_group_size(rows, 2, ["n"]) == rows[:2]


def test_best_row_over_solved_rows_only(run: Path) -> None:  # noqa: F811
    rows = rows_of(run)
    assert best_row(rows, "min", compile_expression("cost"))["cost"] == 8.25
    assert best_row(rows, "max", compile_expression("cost / n_tasks"))["cost"] == 20
    # the timeout ran longest (10 s) but is not solved, so it cannot be the best
    assert best_row(rows, "max", compile_expression("runtime_s"))["outcome"] == "solved"
    assert best_row([r for r in rows if r["outcome"] != "solved"], "min", "runtime_s") is None
    ties = [{"outcome": "solved", "c": 1, "id": "first"}, {"outcome": "solved", "c": 1, "id": "second"}]
    assert best_row(ties, "min", "c")["id"] == "first"
    with pytest.raises(ExpressionError, match="not a number"):
        best_row(rows, "min", compile_expression("variant"))
    with pytest.raises(ReportError, match="neither 'min' nor 'max'"):
        best_row(rows, "median", compile_expression("cost"))  # type: ignore[arg-type]


def test_best_row_skips_rows_without_a_value() -> None:
    rows = [{"outcome": "solved", "c": None}, {"outcome": "solved", "c": float("nan")},
            {"outcome": "solved", "c": 0}, {"outcome": "timeout", "c": -5}, {"outcome": "solved", "c": 3}]
    assert best_row(rows, "min", "c / c") == rows[4]  # 0/0 has no value
    assert best_row(rows, "min", "c") == rows[2]


def test_default_group_by_and_hardness_info(run: Path) -> None:  # noqa: F811
    jobs = load_jobs(run)
    assert default_group_by(jobs) == DIMS
    assert default_group_by(jobs, "aggregate") == []
    plain = [{"key": "a", "rule": "x", "wildcards": {"algo": "a", "size": "3", "seed": "1"}}]
    assert default_group_by(plain) == ["algo", "size"]
    # the record's "scope" holds the job's scope values; the names come from the spec
    scoped = [job("j", "bnb", 1, 1, 0, "solved")]
    scoped[0]["wildcards"]["family"] = "small"
    scoped[0]["hardness"].update(spec=SPEC + "; scope: family", scope=["small"])
    assert default_group_by(scoped) == [*DIMS, "family"]
    assert hardness_info(scoped).order["variant"] == ["heuristic", "bnb", "brute"]
    scoped[0]["hardness"].update(spec=None, scope=["small"])
    assert default_group_by(scoped) == DIMS
    info = hardness_info(jobs)
    assert info.dims == tuple(DIMS) and info.order["variant"] == ["heuristic", "bnb", "brute"]
    # without a parsable spec the hardness vector still gives the declared order
    no_spec = [job("a", "brute", 1, 1, 0, "solved"), job("b", "heuristic", 1, 1, 0, "solved")]
    for record in no_spec:
        record["hardness"]["spec"] = None
    assert hardness_info(no_spec).order["variant"] == ["heuristic", "brute"]


@pytest.mark.parametrize("spec", [
    "variant:heuristic<bnb<heuristic, n_tasks, n_agents",  # a value declared twice
    "variant:heuristic<bnb<brute, n_tasks, n_tasks",  # a dim named twice
    "variant:heuristic<bnb<brute, n-tasks, n_agents",  # not a wildcard name
    "variant:heuristic<bnb<brute, n_tasks, n_agents; scope: ",  # an empty scope
    "variant:heuristic<bnb<brute, n_tasks, n_agents; dataset",  # not a scope
])
def test_a_spec_the_core_refuses_is_refused_by_the_report_too(spec: str) -> None:
    """The report reads hardness with the core's parser, not a lenient one of its own."""
    with pytest.raises(ExpoError):
        HardnessSpec.parse(spec)
    jobs = [job("a", "bnb", 1, 1, 0, "solved")]
    jobs[0]["hardness"]["spec"] = spec
    with pytest.raises(ReportError, match="hardness: the run records the hardness spec"):
        hardness_info(jobs)
    with pytest.raises(ReportError, match="which the executor refuses"):
        default_group_by(jobs)


# --- output -----------------------------------------------------------------------------------------------


def test_to_markdown_table_and_summary() -> None:
    rows = [
        {"rule": "solve", "variant": "b|nb", "n": "7", "outcome": "solved", "cost": 1234.5678, "tiny": 0.000123},
        {"rule": "solve", "variant": "x", "n": "10", "outcome": "timeout", "cost": None, "tiny": 2.0},
        {"rule": "solve", "variant": "y", "n": "11", "outcome": "timeout"},
    ]
    text = to_markdown(rows)
    lines = text.splitlines()
    assert lines[0].split("|")[1:-1] == [" rule  ", " variant ", "   n ", " outcome ", " cost ", "      tiny "]
    assert lines[1].startswith("| ----- | ------- | --: |")
    assert "b\\|nb" in lines[2] and "1235" in lines[2] and "1.230e-04" in lines[2]
    assert lines[3].split("|")[5].strip() == "" and lines[3].split("|")[6].strip() == "2"
    assert lines[5] == "" and lines[6] == "3 rows: 1 solved, 2 timeout"
    assert to_markdown([]).endswith("0 rows")
    assert to_markdown(rows, ["n"]).splitlines()[0] == "|   n |"


def test_format_value() -> None:
    assert [format_value(v) for v in (None, 3, 0.0, 1.5, 123.456, 12345.6, 2.5e7, 1e-5, True, "s")] == [
        "", "3", "0", "1.5", "123.5", "12346", "2.500e+07", "1.000e-05", "True", "s"]


def test_write_csv_round_trip(run: Path, tmp_path: Path) -> None:  # noqa: F811
    rows = rows_of(run)
    path = tmp_path / "out" / "results.csv"
    write_csv(rows, path)
    with path.open(newline="") as handle:
        read = list(csv.DictReader(handle))
    assert len(read) == len(rows)
    assert read[0]["cost"] == "12.5" and read[0]["out_n_tasks"] == "99"
    assert read[-1]["cost"] == ""  # the missing output: an empty cell, not "None"
    assert read[0].keys() >= {"rule", "variant", "outcome", "runtime_s", "worker", "solve_seconds", "label"}


def test_report_skips_the_png_with_fewer_than_two_dims(tmp_path: Path) -> None:
    workdir = tmp_path / "w"
    record = {"v": 1, "key": "a", "rule": "r", "wildcards": {"n": "1"}, "outcome": "solved",
              "hardness": {"spec": "n", "dims": ["n"], "vector": [1.0], "scope": []}, "outputs": []}
    run_dir = make_run(tmp_path / ".expocloud", "r", "2024-01-01T00:00:00", workdir, [json.dumps(record)])
    text = report(run_dir)
    assert "PNG skipped: the rule has fewer than two hardness dims" in text
    assert not (run_dir / "outcomes.png").exists()
    with pytest.raises(ExpressionError):
        report(run_dir, filter="n.real > 0")


def test_outputs_echoing_the_wildcards_add_no_columns(tmp_path: Path) -> None:
    workdir = tmp_path / "work"
    write_output(workdir, "results/bnb/5/2/0.json",
                 {"variant": "bnb", "n_tasks": 5, "n_agents": 2.0, "cost": 7, "seed": 9})
    rows = build_rows([job("j1", "bnb", 5, 2, 0, "solved")], workdir)
    assert rows[0]["cost"] == 7
    assert not {"out_variant", "out_n_tasks", "out_n_agents"} & set(rows[0])
    assert rows[0]["out_seed"] == 9  # a different value is still shown, beside the wildcard
