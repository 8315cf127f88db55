"""The Snakemake front end: ``snakemake --executor expocloud``.

Thin by design, on the shared :class:`~expo_executor.frontends.base.FrontEnd`: its
``describe`` hook turns a Snakemake job into a ``JobRequest`` (the command Snakemake would run
remotely, plus hardness and deadline from the job's resources) and turns the coordinator's
reports back into Snakemake's two outcomes, success and error. Snakemake has no "skipped":
a skipped or timed-out job is an error naming the timeout that dominates it, or, with
``--expocloud-on-skip placeholder``, a success whose outputs hold a placeholder text.
"""

from __future__ import annotations

import atexit
import functools
import os
import shlex
from pathlib import Path
from string import Template
from typing import AsyncGenerator, List

from snakemake_interface_common.exceptions import WorkflowError
from snakemake_interface_executor_plugins.executors.base import SubmittedJobInfo
from snakemake_interface_executor_plugins.executors.remote import RemoteExecutor
from snakemake_interface_executor_plugins.jobs import JobExecutorInterface
from snakemake_interface_executor_plugins.settings import (CommonSettings, DeploymentMethod,
                                                           SharedFSUsage)

from expo_executor.coordinator.launch import max_workers, start_coordinator
from expo_executor.coordinator.loop import JobReport, JobRequest
from expo_executor.coordinator.requests import Harvested
from expo_executor.coordinator.rule_machines import shape_book
from expo_executor.coordinator.measured_on import measured_on
from expo_executor.runs.files import RunFiles
from expo_executor.coordinator.settings import ExecutorSettings, validate, worker_memory_mb
from expo_executor.coordinator.state import StateDir
from expo_executor.core.errors import ExpoError
from expo_executor.core.records import EngineName
from expo_executor.core.scheduler import Outcome
from expo_executor.frontends.base import FrontEnd
from expo_executor.frontends.snakemake.describe import Fleet, JobDescriber, identity
from expo_executor.frontends.snakemake import (direct_jobs, job_outputs, job_selection,
                                               workflow_profile)
from expo_executor.frontends.snakemake.head_start import Demand, first_wave, planned_demand
from expo_executor.frontends.snakemake.planned_rules import (Planned, auto_rules, check_software,
                                                             planned_rules,
                                                             resolve_auto_machine_types)
from expo_executor.frontends.snakemake.resource_args import (default_resources_arg,
                                                             set_resources_arg)
from expo_executor.frontends.snakemake.run_budget import log_request_budget
from expo_executor.frontends.snakemake.shipped_sources import check_gce_sharing
from expo_executor.frontends.snakemake.temp_outputs import stored_outputs_args
from expo_executor.protocol.keys import DEPLOY_DIR_ENV
from expo_executor.settings.values import hardness_noise, with_default_slots
from expo_executor.worker import command_clock

common_settings = CommonSettings(
    non_local_exec=True,
    implies_no_shared_fs=False,
    job_deploy_sources=True,
    pass_default_storage_provider_args=True,
    pass_default_resources_args=False,  # given in their units by additional_general_args
    pass_envvar_declarations_to_cmd=False,  # given to the job's environment instead
    auto_deploy_default_storage_provider=False,  # no unpinned installs on workers
    # Snakemake's status thread starts before __post_init__ and would sleep its default 10 s
    # before reading our shorter interval; one second covers __post_init__.
    init_seconds_before_status_checks=1,
)

LOG_TAIL_LINES = 20


class Executor(RemoteExecutor, FrontEnd):
    def __post_init__(self) -> None:
        settings = self.workflow.executor_settings or ExecutorSettings()
        self.state = StateDir(Path(settings.state_dir).resolve())
        try:
            # locally, --cores N is what the fleet may use, as it is for plain Snakemake
            settings = with_default_slots(settings, self._given_cores())
            validate(settings)
            planned = planned_rules(self.workflow, self._given_cores())
            settings = resolve_auto_machine_types(settings, planned, self.state,
                                                  self.logger.info)
            self.settings: ExecutorSettings = settings
            self.slots = settings.slots_per_worker
            self.worker_mem_mb = worker_memory_mb(settings, max_workers(settings))
            fleet = Fleet(self.slots, self.worker_mem_mb,
                          shrink_to_fit=settings.engine == EngineName.LOCAL)
            self.shapes = shape_book(settings, auto_rules(planned), self.state,
                                     self.logger.info,
                                     {rule.name: jobs for rule, (_, jobs) in planned.items()})
            self.describer = JobDescriber(os.path.abspath(self.workflow.main_snakefile), fleet,
                                          self.logger.info, self.shapes,
                                          functools.partial(measured_on, settings),
                                          hardness_noise(settings))
            self._check_rules(planned)
            check_software(settings, self.workflow.deployment_settings.deployment_method,
                           planned)
            expected = planned_demand(first_wave(self.workflow), self.workflow.is_local,
                                      self.describer, self.state.has_frontiers())
            if settings.engine != EngineName.GCE:
                expected = {}  # a local worker starts in a second, free: no head start (below)
        except ExpoError as exc:
            raise WorkflowError(str(exc)) from None
        try:
            self.run_dir = self.state.new_run(settings.run_id)
        except FileExistsError:
            raise WorkflowError(str(ExpoError("--expocloud-run-id", f"run {settings.run_id!r} "
                                              "exists already", "choose a new run id"))) from None
        self.run_id = self.run_dir.name
        self.run_files = RunFiles(self.run_dir)
        self.open_run(settings.engine, settings,
                      snakefile=os.path.abspath(self.workflow.main_snakefile))
        self.coordinator = self._start_coordinator(settings, expected)
        atexit.register(self.coordinator.stop)  # a last resort; shutdown() is the normal path
        self.next_seconds_between_status_checks = min(1.0, self.coordinator.config.poll)
        self.logger.info(f"expocloud: run {self.run_id} on the {settings.engine} engine, up to "
                         f"{max_workers(settings)} workers x {settings.slots_per_worker} slots "
                         f"(state in {self.run_dir})")
        self._warn_lost_annotations()
        self.direct = direct_jobs.DirectJobs(self.workflow, settings.engine == EngineName.LOCAL,
                                             min(self.slots, self._given_cores() or self.slots))
        # last: Snakemake reads its scheduler's selection as this returns
        self.selection = job_selection.Selection(self.describer.order, self.logger.debug,
                                                 self.logger.warning)
        self._give_back_selection = job_selection.take_over(
            self.workflow.scheduling_settings.scheduler, self.selection, self.logger.info)

    def _start_coordinator(self, settings: ExecutorSettings, expected: Demand):
        """The run's coordinator thread, once the storage settings suit the engine and the
        jobs on its workers can load the workflow (``shipped_sources``), told what the planned
        jobs will want (its first VMs' head start: head_start.py)."""
        storage = self.workflow.storage_settings
        try:
            if settings.engine == EngineName.GCE:
                check_gce_sharing(self.workflow)
            return start_coordinator(settings, self.run_dir, self.state, self.logger.info,
                                     storage.default_storage_prefix, self.shapes, expected)
        except ExpoError as exc:
            raise WorkflowError(str(exc)) from None

    def _warn_lost_annotations(self) -> None:
        """One line when the workflow's profiles/default gives hardness or deadlines that this
        run's rules lack: a --workflow-profile replaced it (workflow_profile.py)."""
        line = workflow_profile.check(
            Path(os.path.abspath(self.workflow.main_snakefile)), Path.cwd(),
            {rule.name: {name for name, _ in rule.resources.items()}
             for rule in self.workflow.rules})
        if line:
            self.logger.warning(line)

    def _check_rules(self, planned: Planned) -> None:
        """Reject bad hardness specs, deadlines and shapes of every planned rule before a
        worker starts; what a rule gives as a function is checked when its job comes."""
        for rule, (values, _) in planned.items():
            self.describer.check_rule(rule.name, values)

    def _given_cores(self) -> int | None:
        """Snakemake's ``--cores N``; None when not given (the job's snakemake then gets
        ``--cores all``)."""
        return self.cores if isinstance(self.cores, int) else None

    # -- the front end's hooks ----------------------------------------------------------------
    def describe(self, job: JobExecutorInterface) -> JobRequest:
        """The command Snakemake would run remotely (a direct job's: its shell line,
        direct_jobs.py), with hardness, deadline and CPUs from the job's resources; raises
        ExpoError on a bad annotation or a job no worker holds."""
        env = dict(self.envvars())  # the Snakefile's envvars: and storage plugins' secrets
        stable = identity(job)
        harvested = self._harvested(job, stable)
        direct = self.direct.command(job) if harvested is None else None
        argv = direct.argv if direct else \
            ["/bin/sh", "-c", f"{command_clock.ANNOUNCE}; {self._job_command(job)}"]
        request = self.describer.describe(
            job, argv, None if self.settings.engine == EngineName.GCE else os.getcwd(),
            {**env, **direct.env} if direct else env, redact=_secret_values(env),
            logs=_log_files(job, self.workflow.storage_settings.default_storage_prefix),
            identity=stable, harvested=harvested, stage=direct.stage if direct else None)
        if direct:
            self.direct.prepare(job)
        return request

    def _harvested(self, job: JobExecutorInterface, stable: str) -> Harvested | None:
        """What a crashed run's worker solved of this very job after its coordinator died
        (recover.py), when every output it wrote is still there (a local file, or the storage
        object without a shared file system); None: the job runs as usual."""
        found = self.coordinator.harvested.get(stable)
        if found is None:
            return None
        outputs = [o for member in (job.jobs if job.is_group() else [job])
                   for o in member.output]
        missing = [str(o) for o in outputs if not job_outputs.exists(o)]
        if missing:
            self.logger.info(f"expocloud: {self.describer.label(job)} was solved by run "
                             f"{found.run_id}, but {missing[0]} is missing: it runs again")
            return None
        return found

    def _job_command(self, job: JobExecutorInterface) -> str:
        """Snakemake's remote command. When the job's snakemake builds conda environments in
        its worker's directory, it first does only that (``--conda-create-envs-only``) under
        the worker's lock: two jobs starting together on one VM would both build the missing
        environment (Snakemake marks it done only at the end); the later one finds it done."""
        command = self.format_job_exec(job)
        if "--conda-prefix" not in self._deploy_prefixes():
            return command
        # the whole chain (environment declarations, a precommand...) under the lock; the
        # flag goes last, so this relies on Snakemake's remote command having no suffix
        deploy = shlex.quote(f"{command} --conda-create-envs-only")
        return (f'mkdir -p "${DEPLOY_DIR_ENV}" && flock "${DEPLOY_DIR_ENV}/conda.lock" '
                f"/bin/sh -c {deploy} && {command}")

    def get_job_args(self, job: JobExecutorInterface, **kwargs) -> str:
        """Snakemake's, with its ``--unneeded-temp-files`` as a storage-backed run needs it: a
        single job uploads its temp outputs the main process waits for, and a group's pipe and
        service outputs are never stored (storing a FIFO hangs the job): temp_outputs.py."""
        return stored_outputs_args(super().get_job_args(job, **kwargs), job, self.workflow.dag)

    def get_python_executable(self) -> str:
        """Snakemake's remote command starts ``PYTHON -m snakemake``: ours runs Snakemake
        under the command clock, so that the job's deadline times its rule's body, not its
        start-up and file staging (worker/command_clock.py)."""
        return f"{super().get_python_executable()} -m {command_clock.__name__}"

    def submitted(self, job: JobExecutorInterface, request: JobRequest) -> None:
        self.run_job_pre(job)
        self.report_job_submission(SubmittedJobInfo(job, external_jobid=request.task.key))

    # -- Snakemake's calls -------------------------------------------------------------------
    def run_jobs(self, jobs: List[JobExecutorInterface]) -> None:
        """Validate the whole batch first, then hand it over; the scheduler orders it."""
        self.selection.handed_over()
        try:
            self.submit_jobs(jobs)
        except ExpoError as exc:
            raise WorkflowError(str(exc)) from None

    def additional_general_args(self) -> str:
        """Arguments for each job's own snakemake process.

        Its job-rate limiter (default 100 jobs per 1 s) leaves a one-second ``threading.Timer``
        running after the job's single job is done, keeping the process alive: more than half
        of a short job's wall time. Inside a one-job process the limit means nothing. (``0s``,
        not ``1ms``: Snakemake's pattern reads ``1ms`` as one minute.)

        ``--scheduler greedy``: the job's process selects among its one job (or its group's):
        Snakemake's default ILP scheduler, which the main process's own choice would pass on,
        builds a MILP for that and solves it in a CBC process of its own, about a tenth of a
        trivial job's CPU. (Given last, it wins over the one Snakemake passes.)

        ``--max-threads``: without ``--cores``, a job runs with at most its worker's slots, the
        CPUs the scheduler gave it (its ``--cores all`` would let a scaled-down job take the
        machine). With ``--cores N`` the user has said what a job may use, and plain Snakemake
        would give it min(threads, N): so does the job's own snakemake, which gets ``--cores N``.

        ``--default-resources`` and ``--set-resources`` in the units they were given in: as
        Snakemake passes them, ``mem_mib=953.67`` reaches the job as ``mem_mb=953.67``
        (resource_args.py). The latter replaces Snakemake's own, given before it.
        """
        slots = self.shapes.max_slots() if self.shapes else self.slots
        limit = f" --max-threads {slots}" if self._given_cores() is None else ""
        return "--max-jobs-per-timespan 1000/0s --scheduler greedy" + limit + \
            self._resource_args + self._deploy_prefixes()

    @functools.cached_property
    def _resource_args(self) -> str:
        given = self.workflow.resource_settings  # the same for every job: rendered once
        return "".join(f" {arg}" for arg in (  # what Snakemake itself would pass (spawn_jobs.py)
            default_resources_arg(getattr(given, "_parsed_default_resources",
                                          given.default_resources)),
            set_resources_arg(getattr(given, "_parsed_overwrite_resources",
                                      given.overwrite_resources))) if arg)

    def _deploy_prefixes(self) -> str:
        """Where a job's snakemake builds conda environments and pulls apptainer images when
        workers share no software with this machine: the worker's own directory (its
        ``$EXPOCLOUD_DEPLOY_DIR``, expanded by the job's shell), which outlives the job's
        scratch directory, so a VM builds an environment once and its later jobs reuse it."""
        usage = self.workflow.storage_settings.shared_fs_usage
        methods = self.workflow.deployment_settings.deployment_method
        if SharedFSUsage.SOFTWARE_DEPLOYMENT in usage:
            return ""
        args = ""
        if DeploymentMethod.CONDA in methods:
            args += f' --conda-prefix "${DEPLOY_DIR_ENV}/conda"'
        if DeploymentMethod.APPTAINER in methods:
            args += f' --apptainer-prefix "${DEPLOY_DIR_ENV}/apptainer"'
        return args

    def run_job(self, job: JobExecutorInterface) -> None:
        self.run_jobs([job])

    async def check_active_jobs(
        self, active_jobs: List[SubmittedJobInfo]
    ) -> AsyncGenerator[SubmittedJobInfo, None]:
        """Hand over finished jobs; nothing may escape, or Snakemake aborts without cleanup."""
        for job_info in active_jobs:
            try:
                report = self.coordinator.take_report(job_info.external_jobid)
            except Exception as exc:  # pragma: no cover - defensive
                self.logger.warning(f"expocloud: status check failed, will retry: {exc}")
                report = None
            if report is None:
                yield job_info
                continue
            try:
                self._deliver(job_info, report)
            except Exception as exc:
                self.logger.error(f"expocloud: could not report job {report.key}: {exc}")
                try:
                    self.report_job_error(job_info, msg=f"expocloud: {exc}")
                except Exception:
                    pass

    def _deliver(self, job_info: SubmittedJobInfo, report: JobReport) -> None:
        if report.outcome is Outcome.SOLVED:
            self.report_job_success(job_info)
        elif report.outcome is Outcome.FAILED:
            tail = "\n".join(report.log_tail.splitlines()[-LOG_TAIL_LINES:])
            self._report_error(job_info, report, f"{tail}\n" if tail else "")
        elif self.settings.on_skip == "placeholder":
            self._write_placeholders(job_info.job, report)
            # the coordinator's timeout line summarizes it (coordinator/reports.py)
            self.logger.debug(f"expocloud: {self.describer.label(job_info.job)}: {report.message} "
                             "(placeholder outputs written)")
            self.report_job_success(job_info)
        else:
            self._report_error(job_info, report)

    def _report_error(self, job_info: SubmittedJobInfo, report: JobReport,
                      details: str = "") -> None:
        """Snakemake's error for the job: the report's sentence, ``details``, and where its
        saved logs are (also listed among its logs in Snakemake's error block)."""
        if report.logs_dir is None:
            self.report_job_error(job_info, msg=f"{report.message}\n{details}")
            return
        where = _shown(report.logs_dir)
        saved = sorted(str(_shown(p)) for p in report.logs_dir.rglob("*") if p.is_file())
        self.report_job_error(
            job_info, msg=f"{report.message}\n{details}expocloud: its whole log and log files "
            f"are saved in {where}/ (expocloud logs {report.key})\n", aux_logs=saved)

    def _write_placeholders(self, job: JobExecutorInterface, report: JobReport) -> None:
        wildcards = self.describer.wildcards(job)
        text = Template(self.settings.placeholder_text).safe_substitute(
            wildcards, outcome=report.outcome.value, rule=self.describer.rule(job),
            reason=report.message)
        written = job_outputs.write_placeholders(job.output, text)
        self.state.add_placeholders(written, self.describer.rule(job), report.outcome.value,
                                    self.run_id)

    def cancel_jobs(self, active_jobs: List[SubmittedJobInfo]) -> None:
        """Ctrl-C: every VM of the run goes, and every job on it."""
        self.coordinator.stop()

    def shutdown(self) -> None:
        self._give_back_selection()
        self.coordinator.stop()
        if self.settings.engine == EngineName.GCE:
            log_request_budget(self.run_files, self.coordinator,
                               self.settings.slots_per_worker, self.logger.info,
                               self.logger.warning)
        if line := self.direct.summary():
            self.logger.info(line)
        self.close_run()
        super().shutdown()


def _log_files(job: JobExecutorInterface, prefix: str | None) -> dict[str, str]:
    """The job's ``log:`` files (a group job's: its members'), saved with its output should it
    fail: {the path its own snakemake writes, from its working directory: the path the
    Snakefile gives}. They differ without a shared file system, where a log file is the storage
    plugin's local copy (``.snakemake/storage/gcs/BUCKET/PREFIX/logs/a.log``)."""
    prefix = (prefix or "").rstrip("/") + "/"
    files = {}
    for member in job.jobs if job.is_group() else [job]:
        for log in member.log:
            name = str(log)
            if getattr(log, "is_storage", False):
                name = str(log.storage_object.query)
                name = name[len(prefix):] if prefix != "/" and name.startswith(prefix) else name
            files[str(log)] = name
    return files


def _shown(path: Path) -> Path:
    """``path`` as a user reads it: relative to the working directory when under it."""
    return path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path


SHORTEST_SECRET = 6  # shorter values are not blanked: they would garble every log they occur in


def _secret_values(env: dict[str, str]) -> list[str]:
    """What a job's worker blanks out of its reports: the values Snakemake hands a remote job
    in its environment are the Snakefile's ``envvars:`` and the storage plugins' secrets."""
    return sorted({value for value in env.values() if len(value) >= SHORTEST_SECRET})
