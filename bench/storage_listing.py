#!/usr/bin/env python3
"""Time to the first job with GCS as Snakemake's default storage: the dry run (Snakemake's DAG,
every existence check included) of the nested sweep (bench/sweep_workflow.py), side by side:

- ``plain, no storage``: ``snakemake -n`` with files on the local disk: Snakemake's own DAG time;
- ``plain, gcs``: ``snakemake -n --default-storage-provider gcs ...``: the GCS plugin's own
  existence checks (what ``--executor expocloud`` did before frontends/snakemake/storage_listing);
- ``expocloud, gcs``: ``snakemake -n --profile profiles/gce-emulated``: one listing of the prefix.

Storage is the GCS emulator behind a counting proxy (expo_executor/emulator/faulty_proxy.py)
that adds ``--latency`` seconds to every call (30 ms: a GCS round trip from a host near the
bucket). Two bucket states: ``fresh`` (no output yet: a sweep's first run) and ``done`` (every
output in the bucket: a rerun). Reported: wall, CPU of the snakemake process, storage calls
by kind.

    python bench/storage_listing.py --points 5000 --latency 0,0.03 --results
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import (REPO, SNAKEMAKE, fmt, machine_line, run_timed, show_cmd,  # noqa: E402
                    versions, write_section)
from sweep_workflow import make, outputs  # noqa: E402

PROJECT = "expocloud-emulated"
VARIANTS = {
    "plain, no storage": [],
    "plain, gcs": ["--default-storage-provider", "gcs", "--storage-gcs-project", PROJECT,
                   "--default-storage-prefix", "{prefix}"],
    "expocloud, gcs": ["--profile", str(REPO / "profiles" / "gce-emulated"),
                       "--expocloud-gce-endpoint", "http://127.0.0.1:9",
                       "--default-storage-prefix", "{prefix}"],
}


def _upload(endpoint: str, bucket: str, names: list[str]) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    client = storage.Client(project=PROJECT, credentials=AnonymousCredentials(),
                            client_options={"api_endpoint": endpoint})
    target = client.bucket(bucket)
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda name: target.blob(name).upload_from_string(b"x"), names))


def _one(name: str, points: int, state: str, latency: float, emulator: str, work: Path,
         timeout: float) -> dict:
    from expo_executor.emulator.faulty_proxy import FaultyProxy
    from expo_executor.emulator.gcs import fresh_bucket

    folder = work / f"{name.replace(', ', '-').replace(' ', '_')}-{state}-{latency}"
    make(folder, points)
    bucket = fresh_bucket(emulator)
    if state == "done":
        if "gcs" in name:
            _upload(emulator, bucket, [f"wf/{p}" for p in outputs(points)])
        else:
            for path in outputs(points):
                (folder / path).parent.mkdir(parents=True, exist_ok=True)
                (folder / path).write_text("x")
    args = ["-n", "-j", "1", *[a.format(prefix=f"gs://{bucket}/wf") for a in VARIANTS[name]]]
    with FaultyProxy(emulator, rate=0.0) as proxy:
        if latency:
            proxy.slow_down(lambda _request: True, latency)
        env = {**os.environ, "STORAGE_EMULATOR_HOST": proxy.endpoint}
        run = run_timed(name, [str(SNAKEMAKE), *args], folder, folder / "dry-run.log", env,
                        timeout)
        calls = dict(proxy.calls)
    return {"name": name, "state": state, "latency": latency, "points": points,
            "exit": run.exit_code, "wall": run.wall_s, "cpu": run.children_cpu_s,
            "calls": calls, "args": args}


def _table(rows: list[dict]) -> str:
    lines = ["| points | bucket | latency | variant | dry run wall (s) | snakemake CPU (s) "
             "| storage calls | of which listings | per output |",
             "|---:|---|---:|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        total = sum(r["calls"].values())
        wall = fmt(r["wall"], 1) if r["exit"] == 0 else f"{fmt(r['wall'], 1)} (exit {r['exit']})"
        lines.append(f"| {r['points']:,} | {r['state']} | {r['latency'] * 1000:.0f} ms "
                     f"| {r['name']} | {wall} | {fmt(r['cpu'], 1)} | {total:,} "
                     f"| {r['calls'].get('list', 0):,} | {total / r['points']:.3f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--points", default="5000")
    parser.add_argument("--latency", default="0,0.03", help="seconds added per storage call")
    parser.add_argument("--states", default="fresh,done")
    parser.add_argument("--variants", default=";".join(VARIANTS), help="; separated")
    parser.add_argument("--timeout", type=float, default=3600)
    parser.add_argument("--results", action="store_true", help="write bench/RESULTS.md")
    opts = parser.parse_args()
    from expo_executor.emulator.gcs import EmulatorProcess

    rows = []
    emulator = EmulatorProcess()
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    try:
        with tempfile.TemporaryDirectory(prefix="storage-listing-") as tmp:
            for points in (int(p) for p in opts.points.split(",")):
                for state in opts.states.split(","):
                    for latency in (float(x) for x in opts.latency.split(",")):
                        for name in opts.variants.split(";"):
                            if name == "plain, no storage" and latency:
                                continue  # no storage: no latency to add
                            rows.append(_one(name, points, state, latency, emulator.endpoint,
                                             Path(tmp), opts.timeout))
                            print(_table(rows[-1:]).splitlines()[-1], flush=True)
    finally:
        emulator.stop()
    text = "\n\n".join([
        f"`python bench/storage_listing.py --points {opts.points} --latency {opts.latency}` "
        f"({started}). {machine_line(versions())}",
        "Commands (in a folder made by `bench/sweep_workflow.py`; the prefix is a fresh "
        "bucket's `gs://BUCKET/wf`, STORAGE_EMULATOR_HOST the counting proxy):\n"
        + "\n".join(f"- {name}: `{show_cmd(['-n', '-j', '1', *args])}`"
                    for name, args in VARIANTS.items()),
        _table(rows)])
    print(text)
    if opts.results:
        write_section("storage-listing", text)


if __name__ == "__main__":
    main()
