#!/usr/bin/env python3
"""CWL v1.2 conformance: run cwltest over one selection with two CWL runners and compare.

    python bench/cwl_conformance.py [--tool-a cwltool] [--tool-b expocloud-cwl]
        [--tags required,command_line_tool,scatter,conditional,timelimit] [--exclude-tags docker]
        [--subset N|ci | --ids a,b,c] [-j N] [--results-md bench/RESULTS.md] [--junit-dir DIR]

Both runners get the same selection, the same cwltest, the same `-j` and the same extra
arguments (`--tool-args`, default `--no-container`: this machine has a docker client but no
daemon, and many tests *not* tagged `docker` still carry a DockerRequirement hint, for which
cwltool would otherwise try `docker pull` and fail). They run one after the other (not at the same
time, so that their wall times are comparable). Prints the counts, wall times and the tests whose
outcome differs; exits 1 if tool B passes fewer tests than tool A or fails a test A passes.

Selection. The tests are loaded with cwltest's own loader (run in cwltest's interpreter, so that
`$import`ed test indexes, ids and short names are exactly cwltest's), filtered here the way
cwltest filters (`--tags`: any of them; `--exclude-tags`: none of them), and written to a
generated test file that cwltest then runs *whole*. The selection is not made with cwltest's
`-n`/`-s`: cwltest 2.7 labels the results of such a run by their position in the list
(`parse_results` pairs the i-th result with `tests[i]`), so `-s b` is reported in the JUnit XML
under the name of the first test of the file. `--ids` picks tests by id from the whole file
(tags are then ignored); `--subset ci` is the fixed list `CI_SUBSET` below; `--subset N` takes N
tests evenly spread over the tag selection.

Outcomes are read from cwltest's JUnit XML, corrected with its log: cwltest 2.7 writes a
should_fail test that exited 0 into the XML as passed (it counts and logs it as a failure).

Each runner's cwltest runs with TMPDIR set to a scratch directory of its own, removed afterwards
(cwltest creates an --outdir per test with mkdtemp and never removes it).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
import xml.etree.ElementTree as ET
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import versions, write_section  # noqa: E402

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
def _default_tests() -> Path:
    """The conformance tests: $EXPOCLOUD_CWL_CONFORMANCE, else the shared folder beside the repo."""
    for candidate in (os.environ.get("EXPOCLOUD_CWL_CONFORMANCE"),
                      REPO.parent / "shared" / "cwl-v1.2-conformance" / "conformance_tests.yaml",
                      "/work/shared/cwl-v1.2-conformance/conformance_tests.yaml"):
        if candidate and Path(candidate).exists():
            return Path(candidate)
    return REPO.parent / "shared" / "cwl-v1.2-conformance" / "conformance_tests.yaml"


DEFAULT_TESTS = _default_tests()
DEFAULT_TAGS = "required,command_line_tool,scatter,conditional,timelimit"
SECTION = "cwl-conformance"

# `--subset ci`: 38 of the 281 tests of the default selection (the tags above minus `docker`),
# picked by hand from a full run of plain cwltool 3.3 --no-container, -j 2, on the 2-core VM
# (2026-11-21), where all 38 pass and take about 30 s of wall time at -j 2: every tag that occurs
# in the selection is covered by at least one test except `networkaccess` (its two tests need a
# container, and the internet), the selection's own tags by several each (10 scatter: nested,
# flat and dot products, empty lists, valueFrom, subworkflows; 7 conditional: with and without
# JS, pickValue first_non_null/the_only_non_null/all_non_null, `when` under scatter, defaults;
# 3 timelimit), file staging (directories, secondary files, InitialWorkDir, loadListing,
# cwl.output.json) and 7 should_fail tests; among tests of equal coverage the faster were taken.
# Listed in the order of the conformance file. Re-pick when the conformance tests change.
CI_SUBSET = [
    "cl_basic_generation", "nested_cl_bindings", "stderr_redirect_shortcut",
    "stdinout_redirect", "wf_wc_scatter_multiple_merge", "envvar_req",
    "wf_scatter_two_nested_crossproduct", "wf_scatter_two_dotproduct", "wf_scatter_emptylist",
    "wf_simple", "param_evaluation_expr", "json_output_location_relative",
    "wf_scatter_twoparam_dotproduct_valuefrom", "directory_output", "initial_workdir_expr",
    "dynamic_resreq_inputs", "wf_step_access_undeclared_param",
    "scatter_multi_input_embedded_subworkflow", "secondary_files_workflow_propagation",
    "input_records_file_entry_with_format_and_bad_entry_file_format", "timelimit_basic",
    "timelimit_invalid", "timelimit_from_expression_wf", "cwl_requirements_addition",
    "stage_file_array", "listing_requirement_shallow", "any_input_param_graph_no_default_hashmain",
    "the_only_non_null_single_true", "direct_optional_null_result_nojs",
    "first_non_null_all_null_nojs", "all_non_null_multi_non_null_nojs",
    "condifional_scatter_on_nonscattered_false_nojs", "conditionals_nested_cross_scatter_nojs",
    "cond-with-defaults-1", "command_input_file_expression", "invalid_syntax_v10_uses_v12_tool",
    "iwd-jsondump1", "nested_crossproduct_nested_crossproduct_scatter",
]


# ---------------------------------------------------------------------------------- loading tests

_LOADER = r"""
import json, sys
from cwltest import utils
tests, _ = utils.load_and_validate_tests(sys.argv[1])
out = []
for t in tests:
    t = dict(t)
    t["short_name"] = utils.shortname(t["id"]) if isinstance(t.get("id"), str) else None
    out.append(t)
json.dump(out, sys.stdout)
"""


def find_exe(name: str) -> str | None:
    """An executable by name: next to this interpreter first (a venv's bin), then on PATH."""
    if os.sep in name:
        return name if os.access(name, os.X_OK) else None
    local = Path(sys.executable).parent / name
    if local.exists() and os.access(local, os.X_OK):
        return str(local)
    return shutil.which(name)


def script_python(exe: str) -> str:
    """The interpreter of a console script (its shebang), else this one."""
    try:
        with open(exe, "rb") as fh:
            first = fh.readline().decode(errors="replace").strip()
        if first.startswith("#!") and "python" in first:
            return shlex.split(first[2:])[0] if "env " not in first else shlex.split(first[2:])[-1]
    except OSError:
        pass
    return sys.executable


def load_tests(test_file: Path, cwltest: str) -> list[dict]:
    py = script_python(cwltest)
    proc = subprocess.run([py, "-c", _LOADER, str(test_file)], capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"could not load {test_file} with cwltest's loader ({py}):\n{proc.stderr}")
    return json.loads(proc.stdout)


def select(tests: list[dict], tags: str, exclude: str, ids: str | None,
           subset: str | None) -> list[dict]:
    by_id = {t["short_name"]: t for t in tests}
    if ids is not None:
        wanted = [i for i in ids.split(",") if i]
        missing = [i for i in wanted if i not in by_id]
        if missing:
            sys.exit(f"unknown test ids: {', '.join(missing)}")
        return [by_id[i] for i in wanted]
    keep = set(tags.split(",")) if tags else None
    drop = set(exclude.split(",")) if exclude else set()
    sel = [t for t in tests
           if (keep is None or keep & set(t.get("tags", [])))
           and not drop & set(t.get("tags", []))]
    if subset is None:
        return sel
    if subset == "ci":
        missing = [i for i in CI_SUBSET if i not in by_id]
        if missing:
            sys.exit(f"CI_SUBSET names tests not in the test file: {', '.join(missing)}")
        chosen = set(CI_SUBSET)
        return [t for t in tests if t["short_name"] in chosen]   # file order
    try:
        n = int(subset)
    except ValueError:
        sys.exit(f"--subset takes a number or 'ci', not {subset!r}")
    if n <= 0:
        sys.exit("--subset N needs N > 0")
    if n >= len(sel):
        return sel
    step = len(sel) / n
    return [sel[int(k * step)] for k in range(n)]


def write_selection(sel: list[dict], path: Path) -> None:
    """The selected tests as a cwltest file (JSON is YAML); tool and job are absolute URIs."""
    out = []
    for t in sel:
        entry = {"id": t["short_name"], "doc": t.get("doc", ""), "tags": t.get("tags", []),
                 "tool": t["tool"]}
        for key in ("job", "output"):
            if key in t and t[key] is not None:
                entry[key] = t[key]
        if t.get("should_fail"):
            # cwltest's loader turns YAML booleans into ints (1 == True, harmless in the
            # expected outputs), but its schema wants a boolean here
            entry["should_fail"] = True
        out.append(entry)
    # ensure_ascii=False: cwltest reads this with a YAML parser, which turns a JSON surrogate
    # pair such as "\ud83d\udd7a" into two lone surrogates instead of one character
    path.write_text(json.dumps(out, indent=1, ensure_ascii=False), encoding="utf-8")


# ---------------------------------------------------------------------------------- running

class ToolRun:
    def __init__(self, label: str, command: str, extra_args: list[str]):
        self.label = label
        words = shlex.split(command)
        self.name = command
        self.exe_name, self.own_args = words[0], words[1:]
        self.exe = find_exe(self.exe_name)
        self.args = self.own_args + extra_args
        self.wall_s = 0.0
        self.cpu_s = 0.0        # cwltest and the runners it started (rusage of children)
        self.other_load = 0.0   # share of the machine's CPU used by other processes meanwhile
        self.exit_code: int | None = None
        self.junit: Path | None = None
        self.log: Path | None = None
        self.results: dict[str, dict] = {}
        self.version = "?"
        self.summary = ""


def tool_version(cmd: list[str]) -> str:
    try:
        p = subprocess.run([*cmd, "--version"], capture_output=True, text=True, timeout=60)
        return (p.stdout.strip() or p.stderr.strip()).splitlines()[-1][:120]
    except Exception:
        return "?"


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _machine_busy() -> float | None:
    """Busy CPU seconds of the whole machine since boot (all cores), from /proc/stat."""
    try:
        vals = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    except (OSError, ValueError):
        return None
    return (sum(vals) - vals[3] - vals[4]) / os.sysconf("SC_CLK_TCK")


def run_cwltest(run: ToolRun, cwltest: str, selection: Path, ids: list[str], jobs: int,
                timeout: int, junit_dir: Path, work: Path, keep: bool, verbose: bool) -> None:
    wd = work / run.label
    scratch = wd / "tmp"
    scratch.mkdir(parents=True, exist_ok=True)
    run.junit = junit_dir / f"{run.label}.xml"
    run.log = junit_dir / f"{run.label}.log"
    env = dict(os.environ)
    env["TMPDIR"] = str(scratch)
    # the runners and node of this interpreter's environment (a venv's bin) come first
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    argv = [cwltest, "--test", str(selection), "--tool", run.exe, "-j", str(jobs),
            "--timeout", str(timeout), "--junit-xml", str(run.junit)]
    if run.args:
        argv += ["--", *run.args]
    print(f"[{run.label}] {shlex.join(argv)}", flush=True)
    t0 = time.perf_counter()
    c0, b0 = _children_cpu(), _machine_busy()
    with open(run.log, "w") as log:
        if verbose:
            proc = subprocess.Popen(argv, cwd=wd, env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True)
            assert proc.stdout is not None
            for line in proc.stdout:
                log.write(line)
                sys.stdout.write(f"  [{run.label}] {line}")
            run.exit_code = proc.wait()
        else:
            run.exit_code = subprocess.run(argv, cwd=wd, env=env, stdout=log,
                                           stderr=subprocess.STDOUT).returncode
    run.wall_s = time.perf_counter() - t0
    run.cpu_s = _children_cpu() - c0
    if b0 is not None and (b1 := _machine_busy()) is not None:
        run.other_load = max(0.0, (b1 - b0) - run.cpu_s) / (run.wall_s * (os.cpu_count() or 1))
    if not keep:
        shutil.rmtree(scratch, ignore_errors=True)
    run.results = parse_junit(run.junit)
    run.summary = apply_log(run.results, run.log.read_text(errors="replace"), ids)
    print(f"[{run.label}] done in {run.wall_s:.1f} s, {run.cpu_s:.0f} CPU-s, other processes "
          f"{run.other_load:.0%} of the machine (cwltest exit {run.exit_code}); "
          f"log {run.log}", flush=True)


_ANSI = re.compile(r"\x1b?\[[0-9;]*m")   # junit_xml drops the ESC itself


def _reason(text: str | None) -> str:
    """A one-line digest of a failure: the most telling line of the runner's stderr."""
    if not text:
        return ""
    lines = [ln.strip() for ln in _ANSI.sub("", text).splitlines() if ln.strip()]

    def with_next(k: int) -> str:
        ln = lines[k]
        if k + 1 < len(lines) and (ln.endswith(":") or ln.endswith("information.")):
            ln = ln + " " + lines[k + 1]
        return ln[:240]

    for pat in (r"Node\.js engine|Tried nodejs", r"unsupported feature",
                r"Docker is not available"):
        for k, ln in enumerate(lines):
            if re.search(pat, ln):
                return with_next(k)
    for k, ln in enumerate(lines):
        if ln.startswith("ERROR") and ln != "ERROR":
            return with_next(k)
    for ln in reversed(lines):
        if re.search(r"Error|error|failed|Failed|not found", ln):
            return ln[:240]
    return lines[-1][:240]


_CAUSES = (("no Node.js (InlineJavascriptRequirement)", r"Node\.js engine|Tried nodejs"),
           ("DockerRequirement under requirements, with --no-container",
            r"--no-container, but this"),
           ("no container engine for a DockerRequirement", r"Docker is not available"),
           ("timed out", r"^timed out"),
           ("should_fail test exited 0", r"Returned zero but it should be non-zero"),
           ("output differs", r"^output differs"))


def cause(reason: str) -> str:
    for name, pat in _CAUSES:
        if re.search(pat, reason or ""):
            return name
    return "other"


def parse_junit(path: Path) -> dict[str, dict]:
    """short name -> {status: pass|fail|skip, time, reason} from cwltest's JUnit XML."""
    out: dict[str, dict] = {}
    if not path.exists():
        return out
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError:
        return out
    for case in root.iter("testcase"):
        name = case.get("file") or case.get("name") or "?"
        status, reason = "pass", ""
        fail = case.find("failure")
        if fail is None:
            fail = case.find("error")
        skip = case.find("skipped")
        err = case.findtext("system-err") or ""
        if fail is not None:
            status = "fail"
            msg = (fail.get("message") or fail.text or "").strip()
            if msg.startswith("Test timed out"):
                reason = "timed out"
            elif msg and "returned non-zero exit status" not in msg:
                reason = "output differs: " + " ".join(msg.split())[:200]   # compare failure
            else:
                reason = _reason(err) or msg[:200]
        elif skip is not None:
            status, reason = "skip", _reason(err) or "unsupported feature (exit 33)"
        out[name] = {"status": status, "time": float(case.get("time") or 0.0), "reason": reason}
    return out


_LOG_FAIL = re.compile(r"^Test (\d+) (failed|timed out|interrupted): ")
_LOG_WHY = ("Returned zero but it should be non-zero", "Returned non-zero",
            "Does not support required feature", "Compare failure", "Output is not a valid JSON",
            "Parse error")


def apply_log(results: dict[str, dict], log: str, ids: list[str]) -> str:
    """Correct the JUnit results with cwltest's own log; returns its summary line.

    cwltest 2.7 writes a should_fail test that exited 0 into the JUnit XML as passed (its
    TestResult carries no message, and junit_xml drops a failure without a message), though it
    logs it as failed and counts it among the failures. Test numbers in the log are positions in
    the selection file, which cwltest runs whole.
    """
    lines = log.splitlines()
    summary = ""
    for k, ln in enumerate(lines):
        if re.search(r"tests passed|All tests passed", ln):
            summary = ln.strip()
        m = _LOG_FAIL.match(ln)
        if not m:
            continue
        n = int(m.group(1))
        if not 1 <= n <= len(ids):
            continue
        res = results.setdefault(ids[n - 1], {"status": "missing", "time": 0.0, "reason": ""})
        if res["status"] == "pass":
            why = next((x.strip() for x in lines[k + 1:k + 6]
                        if any(w in x for w in _LOG_WHY)), m.group(2))
            res["status"] = "fail"
            res["reason"] = f"{why} (cwltest's JUnit XML says passed; its log says {m.group(2)})"
    return summary


# ---------------------------------------------------------------------------------- reporting

def counts(run: ToolRun, ids: list[str]) -> dict[str, int]:
    c = {"pass": 0, "fail": 0, "skip": 0, "missing": 0}
    for i in ids:
        c[run.results.get(i, {}).get("status", "missing")] += 1
    return c


def machine() -> dict:
    """bench/common.py's machine facts, plus the node that runs JavaScript expressions."""
    facts = versions()
    node = shutil.which("node") or shutil.which("nodejs")
    node_v = "absent"
    if node:
        try:
            node_v = node + " " + subprocess.run([node, "--version"], capture_output=True,
                                                 text=True).stdout.strip()
        except OSError:
            pass
    return {**facts, "cores": facts["nproc"], "node": node_v}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=textwrap.dedent("""\
            examples:
              python bench/cwl_conformance.py                       # full selection, both tools
              python bench/cwl_conformance.py --subset ci -j 2      # the CI list
              python bench/cwl_conformance.py --tool-b cwltool --ids cl_basic_generation
              python bench/cwl_conformance.py --tool-b none         # tool A alone (timing)
            """))
    ap.add_argument("--tool-a", default="cwltool",
                    help="reference runner (a command; words after the first are its own "
                         "arguments), default: cwltool")
    ap.add_argument("--tool-b", default="expocloud-cwl",
                    help="runner under test, default: expocloud-cwl; 'none' runs tool A alone")
    ap.add_argument("--tool-args", default="--no-container",
                    help="arguments given to both runners (after cwltest's `--`), "
                         "default: %(default)s")
    ap.add_argument("--test", type=Path, default=DEFAULT_TESTS,
                    help="cwltest file, default: %(default)s")
    ap.add_argument("--tags", default=DEFAULT_TAGS, help="default: %(default)s")
    ap.add_argument("--exclude-tags", default="docker", help="default: %(default)s")
    grp = ap.add_mutually_exclusive_group()
    grp.add_argument("--subset", metavar="N|ci",
                     help="'ci': the fixed CI list in this script; N: N tests evenly spread "
                          "over the tag selection")
    grp.add_argument("--ids", metavar="a,b,c", help="these tests (by id), tags ignored")
    ap.add_argument("-j", type=int, default=os.cpu_count() or 1,
                    help="tests run at once by cwltest, default: cores (%(default)s)")
    ap.add_argument("--timeout", type=int, default=600,
                    help="cwltest's per-test timeout in s, default: %(default)s")
    ap.add_argument("--results-md", type=Path,
                    help=f"write the '## {SECTION}' section of this file (e.g. bench/RESULTS.md)")
    ap.add_argument("--junit-dir", type=Path,
                    help="keep the JUnit XML and logs here (default: a temporary directory)")
    ap.add_argument("--cwltest", default="cwltest", help="cwltest executable")
    ap.add_argument("--list", action="store_true", help="print the selection and exit")
    ap.add_argument("--keep", action="store_true", help="keep the runners' scratch TMPDIRs")
    ap.add_argument("-v", "--verbose", action="store_true", help="show cwltest's progress")
    args = ap.parse_args(argv)

    cwltest = find_exe(args.cwltest)
    if not cwltest:
        sys.exit(f"cwltest not found ({args.cwltest}); pip install cwltest")
    tests = load_tests(args.test.resolve(), cwltest)
    sel = select(tests, args.tags, args.exclude_tags, args.ids, args.subset)
    ids = [t["short_name"] for t in sel]
    if args.list:
        for t in sel:
            print(f"{t['short_name']}\t{','.join(t.get('tags', []))}")
        print(f"{len(sel)} tests", file=sys.stderr)
        return 0
    if not sel:
        sys.exit("empty selection")

    extra = shlex.split(args.tool_args)
    runs = [ToolRun("A", args.tool_a, extra)]
    if args.tool_b.lower() != "none":
        runs.append(ToolRun("B", args.tool_b, extra))
    for r in runs:
        if not r.exe:
            sys.exit(f"tool {r.label} not found: {r.exe_name}")
        r.version = tool_version([r.exe, *r.own_args])

    work = Path(tempfile.mkdtemp(prefix="cwl_conformance."))
    junit_dir = args.junit_dir.resolve() if args.junit_dir else work
    junit_dir.mkdir(parents=True, exist_ok=True)
    selection = junit_dir / "selection.json"
    write_selection(sel, selection)
    mach = machine()
    started = datetime.datetime.now()
    if args.ids:
        sel_desc = f"--ids, {len(ids)} tests"
    elif args.subset == "ci":
        sel_desc = f"--subset ci: the {len(ids)} tests of CI_SUBSET"
    else:
        sel_desc = (f"tags {args.tags} minus {args.exclude_tags or '-'}"
                    + (f", --subset {args.subset}" if args.subset else ""))
    print(f"{len(sel)} tests selected ({sel_desc}); -j {args.j}; node: {mach['node']}")
    try:
        for r in runs:
            run_cwltest(r, cwltest, selection, ids, args.j, args.timeout, junit_dir, work,
                        args.keep, args.verbose)
    finally:
        if not args.keep and junit_dir != work:
            shutil.rmtree(work, ignore_errors=True)

    # ---- table
    a = runs[0]
    b = runs[1] if len(runs) > 1 else None
    ca = counts(a, ids)
    cb = counts(b, ids) if b else None
    lines = [f"selected: {len(ids)} tests ({sel_desc})", ""]
    hdr = (f"{'':28} {'passed':>7} {'failed':>7} {'skipped':>8} {'missing':>8} {'wall s':>8} "
           f"{'CPU s':>7} {'other load':>10}")
    lines.append(hdr)
    for r, c in ((a, ca), (b, cb)):
        if r is None:
            continue
        lines.append(f"{(r.label + ': ' + r.name)[:28]:28} {c['pass']:7} {c['fail']:7} "
                     f"{c['skip']:8} {c['missing']:8} {r.wall_s:8.1f} {r.cpu_s:7.0f} "
                     f"{r.other_load:10.0%}")
    for r, c in ((a, ca), (b, cb)):
        if r is None or not r.summary:
            continue
        lines.append(f"  cwltest's own summary for {r.label}: {r.summary}")
        m = re.search(r"(\d+) tests passed, (\d+) failures, (\d+) unsupported", r.summary)
        if m and (int(m.group(1)), int(m.group(2)), int(m.group(3))) != \
                (c["pass"], c["fail"] + c["missing"], c["skip"]):
            lines.append("  (!) these counts differ from the table's: see the log")
    for r in runs:
        bad_r = [r.results.get(i, {}) for i in ids
                 if r.results.get(i, {}).get("status", "missing") != "pass"]
        if bad_r:
            by_cause: dict[str, int] = {}
            for res in bad_r:
                key = f"{res.get('status', 'missing')}: {cause(res.get('reason', ''))}"
                by_cause[key] = by_cause.get(key, 0) + 1
            lines.append(f"  {r.label} not passed, by cause: " + "; ".join(
                f"{n} {k}" for k, n in sorted(by_cause.items(), key=lambda kv: -kv[1])))
    diff, regressions = [], []
    if b:
        for i in ids:
            sa = a.results.get(i, {}).get("status", "missing")
            sb = b.results.get(i, {}).get("status", "missing")
            if sa != sb:
                diff.append((i, sa, sb))
                if sa == "pass":
                    regressions.append(i)
        lines.append("")
        if diff:
            lines.append(f"differing tests ({len(diff)}):")
            for i, sa, sb in diff:
                why = b.results.get(i, {}).get("reason") if sb != "pass" else \
                    a.results.get(i, {}).get("reason")
                lines.append(f"  {i}: A {sa}, B {sb}" + (f"  -- {why}" if why else ""))
        else:
            lines.append("no test differs between A and B")
    failing_a = [i for i in ids if a.results.get(i, {}).get("status", "missing") != "pass"]
    if failing_a:
        lines.append("")
        lines.append(f"not passed under A ({len(failing_a)}):")
        for i in failing_a:
            res = a.results.get(i, {})
            lines.append(f"  {i}: {res.get('status', 'missing')}"
                         + (f"  -- {res['reason']}" if res.get("reason") else ""))
    print("\n" + "\n".join(lines))

    bad = bool(b) and (cb["pass"] < ca["pass"] or bool(regressions))
    if b:
        print("\nRESULT: " + ("FAIL (B passes fewer tests than A, or fails a test A passes)"
                             if bad else "OK (B passes every test A passes)"))

    if args.results_md:
        cmd = "python bench/cwl_conformance.py " + shlex.join(argv if argv is not None
                                                               else sys.argv[1:])
        md = [f"## {SECTION}", "",
              f"Reproduce: `{cmd.strip()}`", "",
              f"Measured {started:%Y-%m-%d %H:%M}. Machine: {mach['cores']} cores "
              f"({mach['cpu']}), Linux {mach['kernel']}, Python {mach['python']}, "
              f"node {mach['node']}, git {mach['commit']}.", "",
              f"Selection: {len(ids)} tests of `{args.test}` ({sel_desc}); cwltest -j {args.j}, "
              f"runner arguments `{args.tool_args}`.", "",
              "| runner | version | passed | failed | skipped | wall | CPU | other load |",
              "|---|---|---|---|---|---|---|---|"]
        for r, c in ((a, ca), (b, cb)):
            if r is None:
                continue
            md.append(f"| {r.label}: `{r.name}` | {r.version} | {c['pass']} | "
                      f"{c['fail'] + c['missing']} | {c['skip']} | {r.wall_s:.0f} s | "
                      f"{r.cpu_s:.0f} s | {r.other_load:.0%} |")
        md.append("")
        if b:
            if diff:
                md.append(f"Tests whose outcome differs ({len(diff)}): "
                          + ", ".join(f"`{i}` (A {sa}, B {sb})" for i, sa, sb in diff) + ".")
            else:
                md.append("No test's outcome differs between the two runners.")
            md.append("")
        if failing_a:
            md.append(f"Not passed under A ({len(failing_a)}): "
                      + ", ".join(f"`{i}`" for i in failing_a) + ".")
        write_section(SECTION, "\n".join(md), args.results_md)
        print(f"wrote the {SECTION} section of {args.results_md}")

    print(f"selection, JUnit XML and cwltest logs: {junit_dir}")
    if any(not r.results for r in runs):
        print("no JUnit results from at least one run (see its log)", file=sys.stderr)
        return 2
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
