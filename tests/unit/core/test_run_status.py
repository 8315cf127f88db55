"""What a run's status shows (core/run_status.py) and its page (coordinator/run_page.py), as
functions of the typed snapshot: the text of ``expocloud status``, the outcome map's axes, the
page's refresh and escaping; ``expocloud status --watch`` stops by itself once the run ended."""

from __future__ import annotations

import json
from pathlib import Path

from expo_executor.cli import main
from expo_executor.coordinator.run_page import render
from expo_executor.core.records import HardnessMeta
from expo_executor.core.remaining import Remaining
from expo_executor.core.run_status import (MAX_AXIS, MAX_CELLS, ModelSkipNote, PoolStatus,
                                           RunningJob, RunStatus, TimeoutNote, outcome_map,
                                           text_lines)

from tests.recorded_run import run  # noqa: F401  (the fixture: a recorded, still-open run)

COUNTS = {"queued": 3, "running": 2, "solved": 5, "timeout": 1, "skipped": 4, "failed": 0,
          "model-skipped": 0}
SPEC = "variant:a<b, n, m"


def _status(**changes: object) -> RunStatus:
    fields: dict = dict(
        time=1000.0, counts=COUNTS, workers=2, booting=1, slots=4, interval=10.0,
        cost_usd=0.0123, budget_usd=5.0,
        running_jobs=(RunningJob("solve {n=9, seed=2}", "solve", {"n": "9", "seed": "2"},
                                 "w-1", 990.0, 30.0),),
        pools=(PoolStatus("spot", "e2-standard-2", 1, 2, 0.01),),
        timeouts=(TimeoutNote("solve {n=8, seed=1}", "n=8", 30.2, 30.0, 14, 2, 995.0),))
    fields.update(changes)
    return RunStatus(**fields)


def test_the_text_shows_running_jobs_pools_and_timeouts() -> None:
    lines = text_lines(_status(), now=1002.0)
    assert lines[0] == ("3 queued, 2 running, 5 solved, 1 timed out, 4 skipped, 0 failed | "
                        "2 workers (+1 booting), 4 slots | $0.0123 of $5 budget (as of 2 s ago)")
    assert "  solve {n=9, seed=2}  on w-1  12 s of 30 s" in lines
    assert "  ... and 1 more" in lines  # two running, one listed
    assert "  spot e2-standard-2: 2 ready, 1 booting, $0.0100 so far" in lines
    assert lines[-1] == "  solve {n=8, seed=1} after 30 s (deadline 30 s); pruned 14 queued, " \
                        "cancelled 2 running"


def test_the_record_reads_back_and_an_older_one_reads_too() -> None:
    status = _status(outcome_map=outcome_map([
        (HardnessMeta(SPEC, ("variant", "n", "m"), (0.0, 2.0, 3.0), ()),
         {"variant": "a", "n": "2", "m": "3"}, "solved")]))
    assert RunStatus.from_dict(json.loads(json.dumps(status.to_dict()))) == status
    old = RunStatus.from_dict({**COUNTS, "workers": 2, "booting": 0, "slots": 2, "time": 5.0})
    assert old.counts == COUNTS and old.running_jobs == () and not old.finished
    assert old.stale(now=200.0) and not _status(finished=True).stale(now=1e9)


SKIP = ModelSkipNote("solve {n=12, seed=1}", 0.995, 0.99, 4000.0, 30.0, 998.0)
ESTIMATE = Remaining(7, 600.0, 300.0, 1200.0, 0.5, 0.25, 1.0)


def test_model_skips_and_the_estimate_show_in_the_text_and_read_back() -> None:
    counts = {**COUNTS, "model-skipped": 2}
    status = _status(counts=counts, model_skips=(SKIP,), estimate=ESTIMATE)
    lines = text_lines(status, now=1002.0)
    assert lines[0].startswith("3 queued, 2 running, 5 solved, 1 timed out, 4 skipped, "
                               "2 model-skipped, 0 failed |")
    assert lines[1] == ("estimate for 7 jobs: 10 min left (90%: 5 min to 20 min), $0.50 more "
                        "(90%: $0.25 to $1.00)")
    assert lines[-2:] == ["recent model skips:", "  solve {n=12, seed=1}: 99.5% likely to pass "
                          "its deadline of 30 s (predicted median 4000 s; "
                          "--expocloud-skip-above 0.99)"]
    assert RunStatus.from_dict(json.loads(json.dumps(status.to_dict()))) == status


def test_the_page_shows_the_estimate_and_the_model_skips() -> None:
    page = render(_status(model_skips=(SKIP,), estimate=ESTIMATE), "r1", now=1002.0)
    assert '<p id="estimate">estimate for 7 jobs: 10 min left' in page
    assert '<table id="model-skips">' in page and "99.5%" in page
    assert "--expocloud-skip-above 0.99" in page
    hinted = ModelSkipNote("solve {n=13, seed=1}", 0.97, 0.95, None, 30.0, 999.0,
                           "expo:Hardness skipAbove of solve")
    page = render(_status(model_skips=(SKIP, hinted)), "r1", now=1002.0)
    assert "<td>expo:Hardness skipAbove of solve 0.95</td>" in page  # each row its own
    assert "<td>--expocloud-skip-above 0.99</td>" in page
    finished = render(_status(estimate=ESTIMATE, finished=True), "r1", now=1002.0)
    assert 'id="estimate"' not in finished and 'id="model-skips"' not in finished


def _job(variant: str, n: int, m: int, state: str) -> tuple:
    hardness = HardnessMeta(SPEC, ("variant", "n", "m"), (float("ab".index(variant)), n, m), ())
    return hardness, {"variant": variant, "n": str(n), "m": str(m)}, state


def test_the_outcome_map_facets_the_first_dim_and_orders_axes_by_hardness() -> None:
    jobs = [_job("b", 10, 1, "skipped"), _job("a", 9, 1, "solved"), _job("a", 9, 1, "timeout"),
            _job("a", 10, 2, "running"),
            (HardnessMeta("other", ("k",), (1.0,), ()), {"k": "1"}, "solved")]
    omap = outcome_map(jobs)
    assert omap is not None
    assert (omap.facet, omap.x, omap.y) == ("variant", "n", "m")
    assert (omap.facets, omap.xs, omap.ys) == (("a", "b"), ("9", "10"), ("1", "2"))
    assert omap.cells[("a", "9", "1")] == {"solved": 1, "timeout": 1}
    assert sum(sum(c.values()) for c in omap.cells.values()) == 4, "another spec is left out"
    assert outcome_map([(None, {}, "solved")]) is None
    wide = outcome_map([_job("a", n, 0, "queued") for n in range(MAX_AXIS + 5)])
    assert wide is not None and len(wide.xs) == MAX_AXIS


def test_the_page_refreshes_while_running_and_escapes_what_jobs_say() -> None:
    evil = RunningJob("<script>alert(1)</script>", "r", {}, "w-<b>", 990.0, None)
    page = render(_status(running_jobs=(evil,)), "run<1>", now=1000.0)
    assert '<meta http-equiv="refresh" content="5">' in page
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "w-&lt;b&gt;" in page and "run&lt;1&gt;" in page
    assert "http" not in page.replace('http-equiv', ''), "no external resource"
    finished = render(_status(finished=True), "run", now=1000.0)
    assert "refresh" not in finished and ">finished<" in finished


def test_watch_ends_by_itself_once_the_run_has_ended(run: Path, capsys) -> None:  # noqa: F811
    (run / "status.json").write_text(json.dumps(_status(finished=True).to_dict()))
    (run / "run.html").write_text(render(_status(finished=True), run.name, now=1000.0))
    assert main(["status", "--watch", "--interval", "0.01", "--state-dir",
                 str(run.parent.parent)]) == 0
    out = capsys.readouterr().out
    assert "(as of" in out and "finished" in out
    assert f"page: {(run / 'run.html').resolve()}" in out
    assert main(["status", "--interval", "0", "--state-dir", str(run.parent.parent)]) == 2
    assert "--interval: 0 is not a positive number" in capsys.readouterr().err


def test_the_outcome_map_draws_a_bounded_number_of_cells_however_many_jobs() -> None:
    """A sweep of 50,000 jobs over three dims drew a cell per job on every status (a 5 MB
    run.html and a 1.7 MB status.json every 10 s; bench/RESULTS.md, "Issue 31: sweeps"): the
    panels beyond MAX_CELLS are left out, the first ones in hardness order kept."""
    spec = "v, n, m"
    jobs = [(HardnessMeta(spec, ("v", "n", "m"), (float(v), float(n), float(m)), ()),
             {"v": str(v), "n": str(n), "m": str(m)}, "solved")
            for v in range(4) for n in range(MAX_AXIS) for m in range(MAX_AXIS)]
    omap = outcome_map(jobs)
    assert omap is not None and (len(omap.xs), len(omap.ys)) == (MAX_AXIS, MAX_AXIS)
    drawn = len(omap.facets) * len(omap.xs) * len(omap.ys)
    assert drawn <= MAX_CELLS, f"{drawn} cells drawn"
    assert omap.facets == tuple(str(v) for v in range(MAX_CELLS // MAX_AXIS ** 2))
    assert {facet for facet, _, _ in omap.cells} == set(omap.facets)
    small = outcome_map(jobs[:MAX_AXIS * MAX_AXIS])  # one panel: all of it
    assert small is not None and small.facets == ("0",) and len(small.cells) == MAX_AXIS ** 2
