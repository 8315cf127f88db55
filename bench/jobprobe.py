#!/usr/bin/env python3
"""Run ``python -m snakemake ARGS`` in this process and record when Snakemake's main returned.

Usage: BENCH_PROBE_OUT=FILE python bench/jobprobe.py SNAKEMAKE-ARGS...

Writes {"main_returned": <time.time()>, "lingering": [non-daemon threads still alive]} to FILE,
then exits as Snakemake would. The caller compares "main_returned" with the moment the process
is reaped: the difference is what the interpreter spends waiting for threads at exit.
"""

import json
import os
import runpy
import sys
import threading
import time

sys.argv = ["snakemake", *sys.argv[1:]]
code = 0
try:
    runpy.run_module("snakemake", run_name="__main__", alter_sys=True)
except SystemExit as exc:
    code = exc.code
returned = time.time()
lingering = [f"{t.name} ({type(t).__module__}.{type(t).__name__})" for t in threading.enumerate()
             if t is not threading.main_thread() and not t.daemon]
with open(os.environ["BENCH_PROBE_OUT"], "w") as handle:
    json.dump({"main_returned": returned, "lingering": lingering}, handle)
sys.exit(code)
