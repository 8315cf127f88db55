"""The run page (``run.html``) in a real headless browser, from a real sweep on the local engine:
while the sweep runs the page reloads itself and shows the jobs running and the outcome map
filling in; once it ended it shows the final counts, one map cell per job in its outcome, the
pool, the timeouts with what each pruned, and stops reloading. The log says each timeout once,
with what it pruned, and no per-job skip line.

Chromium comes from Debian's packages (.ci/run installs it). Screenshots of the page, running
and finished, go to ``$EXPOCLOUD_CI_OUTPUT`` (CI's output folder, which .ci/run prints), else
to the test's temporary directory.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

from tests.helpers import SNAKEMAKE, job_records, require, run_dirs, wait_until

SNAKEFILE = """
rule all:
    input: expand("out/{a}/{n}.txt", a=["x", "y"], n=[0, 1, 2, 3])

rule work:
    output: "out/{a}/{n}.txt"
    shell: "if [ {wildcards.n} -gt 1 ]; then sleep 300; fi; echo solved > {output}"
"""
DEADLINE = 4
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--window-size=1200,900"]


def _output_dir(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("EXPOCLOUD_CI_OUTPUT") or tmp_path / "output")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _chromium(page: Path, tmp_path: Path, *args: str) -> str:
    """Chromium's stdout for ``page`` (a ``file://`` URL, as a user opens it)."""
    profile = tmp_path / f"chromium-profile-{len(list(tmp_path.glob('chromium-profile-*')))}"
    result = subprocess.run(["chromium", *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args,
                             page.resolve().as_uri()], capture_output=True, text=True,
                            timeout=180)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def _screenshot(page: Path, path: Path, tmp_path: Path) -> None:
    path.unlink(missing_ok=True)
    _chromium(page, tmp_path, f"--screenshot={path}")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f"no screenshot at {path}"
    print(f"run page screenshot: {path}")


def _sweep(workdir: Path) -> subprocess.Popen:
    (workdir / "Snakefile").write_text(SNAKEFILE)
    return subprocess.Popen(
        [SNAKEMAKE, "--executor", "expocloud", "-j", "100", "--set-resources",
         'work:hardness="a:x<y, n"', f"work:deadline={DEADLINE}s",
         "--expocloud-max-workers", "2", "--expocloud-slots-per-worker", "1",
         "--expocloud-poll-interval", "0.1", "--expocloud-status-interval", "0.5",
         "--expocloud-on-skip", "placeholder"],
        cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _page_while_running(workdir: Path, tmp_path: Path) -> Path:
    """A copy of the page as it was while a sleeping job ran (until its deadline)."""
    copy = tmp_path / "running.html"

    def running() -> bool:
        pages = list((workdir / ".expocloud" / "runs").glob("*/run.html"))
        if not pages:
            return False
        text = pages[0].read_text()
        if 'data-state="running"' not in text or "{a=x, n=2}" not in text:
            return False
        copy.write_text(text)
        return True
    assert wait_until(running, timeout=120), "no page ever showed a job running"
    return copy


def test_the_run_page_in_a_browser(tmp_path: Path) -> None:
    require(shutil.which("chromium") is not None,
            "chromium is not installed (apt-get install chromium)")
    output = _output_dir(tmp_path)
    sweep = _sweep(tmp_path)
    try:
        during = _page_while_running(tmp_path, tmp_path)
        log, _ = sweep.communicate(timeout=300)
    finally:
        sweep.kill()
        sweep.wait()
    assert sweep.returncode == 0, log[-3000:]

    dom = _chromium(during, tmp_path, "--dump-dom")
    assert 'http-equiv="refresh"' in dom and ">running</span>" in dom
    assert re.search(r'<table id="running">.*work \{a=x, n=2\}', dom, re.S), dom
    _screenshot(during, output / "run-page-running.png", tmp_path)

    run_dir = run_dirs(tmp_path)[-1]
    records = list(job_records(run_dir).values())
    outcomes = Counter(r["outcome"] for r in records)
    assert outcomes["timeout"] >= 1 and outcomes["skipped"] >= 1, outcomes
    _check_log(log, records)

    dom = _chromium(run_dir / "run.html", tmp_path, "--dump-dom")
    assert "http-equiv" not in dom and ">finished</span>" in dom
    assert (f"{outcomes['solved']} solved, {outcomes['timeout']} timed out, "
            f"{outcomes['skipped']} skipped, 0 failed") in dom
    cells = Counter(re.findall(r'<td class="cell (\w+)"', dom))
    assert cells == outcomes, "one map cell per job, in its outcome"
    assert re.search(r'<tr class="pool"><td>local</td><td>this machine</td>', dom), dom
    assert dom.count('<tr class="timeout">') == outcomes["timeout"]
    _screenshot(run_dir / "run.html", output / "run-page.png", tmp_path)


def _check_log(log: str, records: list[dict]) -> None:
    """Each timeout once, with what it pruned: together, every skip of the run."""
    lines = re.findall(r"expocloud: timeout: (work \{.*?\}) after \d+ s \(deadline \d+ s\); "
                       r"pruned (\d+) queued, cancelled (\d+) running", log)
    timed_out = sorted(f"work {{a={r['wildcards']['a']}, n={r['wildcards']['n']}}}"
                       for r in records if r["outcome"] == "timeout")
    assert sorted(label for label, _, _ in lines) == timed_out, log[-3000:]
    skipped = [r for r in records if r["outcome"] == "skipped"]
    pruned, cancelled = (sum(int(line[i]) for line in lines) for i in (1, 2))
    assert pruned + cancelled == len(skipped)
    # a cancelled job was on a worker: running (killed), or held there and never started
    assert cancelled >= sum(r["killed"] for r in skipped)
    assert pruned <= sum(not r["killed"] for r in skipped)
    assert "as hard as or harder than" not in log, "no per-job skip line in the log"
