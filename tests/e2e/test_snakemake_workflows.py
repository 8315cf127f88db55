"""Snakemake's own test workflows, unchanged, through ``--executor expocloud``.

"Existing pipelines run unchanged" measured on pipelines we did not write: each case below is a
test of Snakemake's suite (read from the installed version's sdist, tests/snakemake_suite.py),
run in a copy of its folder with the arguments its own test gives, first by plain Snakemake,
then through expocloud: on the local engine (``LOCAL``) and on the emulated GCE path with files
through the emulated bucket (``GCE``). Where plain Snakemake does what the test asks, expocloud
must too, with the same expected results. The cases span threads, resources (lazy, default,
set, inferred), params, config, scripts, ``run:`` blocks, logs, benchmarks, temp and protected
files, shadow, directories, groups, pipes, checkpoints, scatter-gather, local rules, retries,
modules and includes and ``Paramspace``. ``LEFT_OUT`` says why the others near them are not run.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from expo_executor.emulator.compute import FakeCompute
from tests import snakemake_suite as suite
from tests import snakemake_suite_gcs as gcs
from tests.emulated_gce import emulated_args, emulated_env, fake_compute  # noqa: F401
from tests.gcs_emulator import gcs_emulator  # noqa: F401
from tests.helpers import run_snakemake

pytestmark = pytest.mark.slow

# Also passing on the local engine when last measured (docs/snakemake-on-gce.md measures the
# GCE path), left out for CI time: test05, test06, test08, test11, test12,
# test13, test15, test_format_params, test_yaml_config, test_spaces_in_fnames,
# test_wildcard_keyword, test_multiext, test_expand_flag, test_shadow_prefix, test_shadow_copy,
# test_retries_not_overriden, test_pipes_multiple, test_pipes2, test_handover,
# test_checkpoints_many, test_scheduler_sequential_all_cores, test_paramspace_single_wildcard,
# test_update_config, test_config_yte, test_threads0, test_temp_and_all_input,
# test_ensure_success, test_empty_include, test_modules_specific.
LOCAL = [
    # basics, params, config, run: blocks, shell, scripts
    "test01", "test02", "test03", "test07", "test09", "test10", "test_params",
    "test_nonstr_params", "test_config", "test_run_namedlist", "test_shell",
    "test_script_import_snakemake_obj", "test_local_import", "test_source_path",
    # threads and resources (lazy, default, set, inferred); --cores as the local fleet
    "test_threads", "test_core_dependent_threads", "test_cores_limited_by_global_supply",
    "test_github_issue1618",
    "test_lazy_resources", "test_default_resources", "test_default_resources_mebibytes",
    "test_set_resources",
    "test_inferred_resources", "test_priority",
    # logs, temp and protected files, shadow, directories
    "test_shadowed_log", "test_log_input", "test_temp_expand", "test_all_temp",
    "test_protected_symlink_output", "test_shadow", "test_checkpoints_dir",
    "test_github_issue413",
    # groups and pipes, service jobs
    "test_pipes_simple", "test_pipe_depend", "test_service_jobs",
    # checkpoints, scatter-gather, local rules, retries, until/omit-from
    "test_checkpoints", "test_module_checkpoint", "test_scatter_gather", "test_localrule",
    "test_retries", "test_until", "test_omitfrom",
    # modules and includes, Paramspace
    "test_modules_all", "test_multiple_includes", "test_paramspace",
]

# A subset of LOCAL (where plain Snakemake's pass is checked). Also passing on GCE when last
# measured (docs/snakemake-on-gce.md: 63 of the 64 cases plain Snakemake passes with the bucket
# as default storage; the other one is in LEFT_OUT), left out for CI time: test03, test06,
# test07, test08, test09, test10, test11, test12, test13, test15, test_all_temp,
# test_config_yte, test_cores_limited_by_global_supply, test_empty_include, test_expand_flag,
# test_format_params, test_handover, test_modules_specific, test_multiext,
# test_multiple_includes, test_omitfrom, test_paramspace, test_paramspace_single_wildcard,
# test_retries_not_overriden, test_scheduler_sequential_all_cores, test_set_resources,
# test_shadow_prefix, test_shadowed_log, test_spaces_in_fnames, test_temp_and_all_input,
# test_threads0, test_until, test_update_config, test_yaml_config.
GCE = ["test02", "test_config", "test_run_namedlist", "test_shell", "test_nonstr_params",
       "test_script_import_snakemake_obj", "test_local_import", "test_source_path",
       "test_log_input", "test_core_dependent_threads", "test_inferred_resources",
       "test_checkpoints", "test_scatter_gather", "test_retries", "test_localrule",
       "test_temp_expand", "test_github_issue413",
       # threads beyond a default GCE worker's one slot: each such rule gets a machine that
       # holds it, with no profile edit (3 threads; 20 threads; a rule of 5 with --cores 5)
       "test01", "test_threads", "test_github_issue1618",
       # groups and pipes: one remote job runs the group's rules (docs/real-pipelines.md)
       "test_pipes_simple", "test_default_resources",
       # --default-resources in MiB reach a job's snakemake in MiB (resource_args.py)
       "test_default_resources_mebibytes"]
# Also passing on GCE when last measured, left out for CI time (groups and pipes, sized by
# default): test_pipes2, test_pipe_depend, test_group_jobs, test_group_jobs_attempts,
# test_multicomp_group_jobs, test_group_job_fail.

LEFT_OUT = {  # near the ones run, and why not (Snakemake 9.27.1, measured on this machine)
    "test_groupid_expand_local": "its expected results name the local executor's group id "
    "('local'): Job.updated gives a job in a group job its GroupJob.jobid, a UUID, and "
    "'local' only where there are no group jobs (local execution: Rule.group is None); the ids "
    "are fixed in the main process's DAG before Snakemake creates the executor, so no "
    "executor can give 'local' (cluster-generic fails it the same way). Its remote twin, "
    "test_groupid_expand_cluster (the same Snakefile, the UUIDs expected), passes on both "
    "engines: test_group_ids_are_snakemakes_remote_ones; docs/snakemake-on-gce.md",
    "test_pipes_fail": "plain snakemake hangs on it here (no result within 240 s)",
    "test_params_pickling, test_directory2": "plain snakemake fails them here",
    "test_benchmark, test_benchmark_jsonl": "need stress-ng, not installed",
    "test_modules_prefix, test_ancient": "need the http storage plugin and the internet",
    "GCE: test_lazy_resources": "its resource function reads a local file that is only in "
    "storage: plain snakemake fails it too with the bucket as default storage",
    "GCE: test_pipes_multiple": "plain snakemake fails it with storage as the default "
    "provider: expand() of rules.b.output refuses the output's storage flag",
    # plain Snakemake fails these too with the emulated bucket as its default storage:
    "GCE: test05, test_params, test_checkpoints_dir, test_checkpoints_many": "a job writes "
    "or removes a literal path, not its output's local copy of the storage object ({output} "
    "is .snakemake/storage/gcs/BUCKET/...): test05's 'touch other.txt', test_params' "
    "'rm -r {params.dir}', test_checkpoints_dir's 'mkdir clustering/{wildcards.sample}', "
    "test_checkpoints_many's Path(sample).touch()",
    "GCE: test_shadow": "its absolute input path is taken into the storage prefix "
    "(gs://BUCKET/PREFIX//tmp/.../test.in: MissingInputException)",
    "GCE: test_modules_all, test_module_checkpoint": "a module's prefix makes an expand() "
    "pattern of a storage object's path (WorkflowError: flags given to expand() are invalid)",
    "GCE: test_priority, test_protected_symlink_output, test_service_jobs": "plain snakemake "
    "fails them with the bucket as default storage: a literal 'echo a > a.out', a literal "
    "'test ! -e outlink', a service job's socket that cannot be stored",
}


@pytest.fixture(scope="module")
def tests_dir() -> Path:
    return suite.tests_dir()


@pytest.fixture(scope="module")
def cases(tests_dir: Path) -> dict[str, suite.Case]:
    return suite.read_cases(tests_dir)


def _plain(tests_dir: Path, case: suite.Case, tmp_path: Path) -> None:
    """Skip a case plain Snakemake itself does not pass here (the rule is 'where plain passes')."""
    workdir = suite.copy_case(tests_dir, case, tmp_path / "plain")
    proc = run_snakemake(workdir, *case.args())
    problem = suite.verdict(tests_dir, case, workdir, proc)
    if problem:
        pytest.skip(f"plain snakemake does not pass {case.test} here: {problem[:300]}")


def _local_engine_problem(tests_dir: Path, case: suite.Case, tmp_path: Path) -> str:
    """The case through ``--executor expocloud`` on the local engine: '' when it passes."""
    workdir = suite.copy_case(tests_dir, case, tmp_path / "expocloud")
    proc = run_snakemake(workdir, "--executor", "expocloud", "--jobs", "10",
                         "--expocloud-idle-timeout", "1", *case.args())
    return suite.verdict(tests_dir, case, workdir, proc)


def _emulated_gce_problem(tests_dir: Path, case: suite.Case, tmp_path: Path,
                          compute: FakeCompute, storage: str) -> str:
    """The case through profiles/gce-emulated, files through the emulated bucket, judged on
    what it stored: '' when it passes."""
    workdir = suite.copy_case(tests_dir, case, tmp_path / "expocloud")
    gcs.git_init(workdir)
    # the profile as it is (GCE's default slots: a job beyond them gets a machine of its own)
    args = emulated_args(compute, storage, None, *gcs.FAST_POLLS, *case.args())
    bucket, prefix = gcs.bucket(storage, args[args.index("--default-storage-prefix") + 1])
    gcs.stage_inputs(workdir, bucket, prefix)
    proc = run_snakemake(workdir, *args, env=emulated_env(storage), timeout=600)
    results = tmp_path / "results"
    gcs.fetch_results(tests_dir, case, bucket, prefix, results)
    return gcs.storage_verdict(tests_dir, case, workdir, results, proc)


@pytest.mark.parametrize("test", LOCAL)
def test_local_engine(test: str, tests_dir: Path, cases: dict[str, suite.Case],
                      tmp_path: Path) -> None:
    case = cases[test]
    _plain(tests_dir, case, tmp_path)
    problem = _local_engine_problem(tests_dir, case, tmp_path)
    assert not problem, problem


@pytest.mark.parametrize("test", GCE)
def test_emulated_gce(test: str, tests_dir: Path, cases: dict[str, suite.Case], tmp_path: Path,
                      fake_compute, gcs_emulator) -> None:  # noqa: F811
    problem = _emulated_gce_problem(tests_dir, cases[test], tmp_path, fake_compute,
                                    gcs_emulator)
    assert not problem, problem


@pytest.mark.parametrize("engine", ["local", "gce"])
def test_group_ids_are_snakemakes_remote_ones(engine: str, tests_dir: Path,
                                              cases: dict[str, suite.Case], tmp_path: Path,
                                              request: pytest.FixtureRequest) -> None:
    """An input function's ``groupid`` is what Snakemake gives a remote group job: the UUID
    of the group's last job. Snakemake's suite asks for it in test_groupid_expand_cluster,
    the remote twin of test_groupid_expand_local (same Snakefile; 'local' is the id only
    where groups are ignored, i.e. local execution). Plain Snakemake cannot pass this twin,
    Snakemake's own cluster-generic executor does (docs/snakemake-on-gce.md), and so must
    expocloud, whose runs are remote on both engines."""
    case = cases["test_groupid_expand_cluster"]
    if engine == "local":
        problem = _local_engine_problem(tests_dir, case, tmp_path)
    else:
        problem = _emulated_gce_problem(tests_dir, case, tmp_path,
                                        request.getfixturevalue("fake_compute"),
                                        request.getfixturevalue("gcs_emulator"))
    assert not problem, problem


def test_the_selection_spans_what_it_promises() -> None:
    def names(gce: bool) -> set[str]:
        return {name.strip() for key in LEFT_OUT if key.startswith("GCE:") == gce
                for name in key.removeprefix("GCE:").split(",")}

    assert len(LOCAL) == len(set(LOCAL)) >= 40
    assert len(GCE) == len(set(GCE)) >= 15 and set(GCE) <= set(LOCAL)
    assert not names(gce=False) & set(LOCAL) and not names(gce=True) & set(GCE)
