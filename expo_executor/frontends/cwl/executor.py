"""cwltool's executor for expocloud: every command-line job goes through the coordinator.

cwltool keeps what it does well (expressions, scatter, conditionals, output collection); this
executor only changes where commands run. It walks cwltool's job generator like the stock
executors, but a command-line job is prepared here (directories, staged inputs), handed to the
coordinator as a fully evaluated command, and finished here when its report comes back. All
jobs cwltool yields before it pauses (``None``) go to the scheduler together, so a scatter is
ordered by hardness, not by generation order. The shared steps (describe a batch, then submit
it; the CPU and memory check; run.json) are :class:`~expo_executor.frontends.base.FrontEnd`'s;
:meth:`ExpoExecutor.describe` is the hook.

Outcomes map onto CWL's: a job skipped because an easier one timed out is reported as CWL
v1.2 reports an element whose ``when`` is false (every output null, status ``skipped``), so the
workflow succeeds and ``pickValue: all_non_null`` drops it; a timed-out job of a swept tool is
skipped too unless ``--expocloud-on-timeout permanentFail``.
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

from cwltool.context import RuntimeContext
from cwltool.errors import WorkflowException
from cwltool.executors import JobExecutor
from cwltool.job import ContainerCommandLineJob, relink_initialworkdir
from cwltool.loghandler import _logger
from cwltool.process import Process, stage_files
from cwltool.utils import CWLObjectType, bytes2str_in_dicts

from expo_executor.coordinator.loop import Coordinator, JobReport, JobRequest
from expo_executor.runs.files import RunFiles
from expo_executor.coordinator.state import FamilyRef
from expo_executor.core.errors import ExpoError
from expo_executor.core.records import HardnessMeta, JobMeta
from expo_executor.core.runtime_model import ModelSpec
from expo_executor.core.scheduler import Outcome, Task
from expo_executor.core.shapes import Shape
from expo_executor.frontends.base import FrontEnd, job_request
from expo_executor.frontends.cwl.hints import SweepJob, param_text, skip_hinted
from expo_executor.frontends.cwl.staging import Staging

WAIT_S = 1.0  # longest wait for reports before looking at the job generator again


class ExpoExecutor(JobExecutor, FrontEnd):
    """Runs a CWL process with its command-line jobs on expocloud workers."""

    def __init__(self, start: Callable[[], Coordinator], workflow: str, slots_per_worker: int,
                 staging_root: Path | None, on_timeout: str = "skipped",
                 worker_mem_mb: int = 0, run_files: RunFiles | None = None,
                 measured_on: tuple[str, str] = ("local", ""),
                 labelled_machine: str | None = None, noise: tuple[str, ...] = ()) -> None:
        super().__init__()
        # the machine type of a tool with expo:Labels, whose jobs get VMs of their own (GCE:
        # the run's Spot type); None: labels are not used (the local engine)
        self.labelled_machine = labelled_machine
        self.noise = noise  # the run's noise inputs for the runtime model (a hint's win)
        if run_files is not None:
            self.run_files = run_files
        self._start = start  # the coordinator starts with the first command: no VM before
        self.coordinator: Coordinator | None = None
        self.workflow = workflow
        self.slots = slots_per_worker
        self.worker_mem_mb = worker_mem_mb  # 0: memory not tracked
        self.staging_root = staging_root  # None: workers share this machine's file system
        self.staging: Staging | None = None
        self.on_timeout = on_timeout
        self.measured_on = measured_on  # (engine, machine): part of a frontier's key
        self._pending: dict[str, tuple[SweepJob, JobRequest]] = {}
        self._keys = itertools.count(1)  # job keys; cwltool's walk is single-threaded
        self._rc: RuntimeContext | None = None  # the walk's context, for describe
        # the tools whose hint gives skipAbove: the run's start turns the model on for them
        self.skip_hinted: tuple[str, ...] = ()

    # -- the generator walk ------------------------------------------------------------------
    def run_jobs(self, process: Process, job_order_object: CWLObjectType,
                 logger: logging.Logger, runtime_context: RuntimeContext) -> None:
        self._rc = runtime_context
        self.skip_hinted = skip_hinted(process)
        batch: list[SweepJob] = []
        for job in process.job(job_order_object, self.output_callback, runtime_context):
            if job is None:  # cwltool waits for outstanding jobs: send the batch, take reports
                self.submit_jobs(batch)
                batch = []
                if not self._pending:
                    raise WorkflowException("the workflow cannot make progress: no job runs "
                                            "and none is ready")
                self._take_reports(runtime_context)
                continue
            if getattr(job, "outdir", None):
                self.output_dirs.add(job.outdir)
            if isinstance(job, SweepJob):
                batch.append(job)
            else:  # workflow bookkeeping and expressions run here, as in cwltool
                job.run(runtime_context)
        self.submit_jobs(batch)
        while self._pending:
            self._take_reports(runtime_context)

    def started(self) -> Coordinator:
        """The coordinator, started with the first command: no VM before there is work."""
        if self.coordinator is None:
            self.coordinator = self._start()
            if self.staging_root is not None:
                self.staging = Staging(self.coordinator.bucket, self.staging_root)
        return self.coordinator

    def describe(self, job: SweepJob) -> JobRequest:
        assert self._rc is not None, "describe is called during run_jobs' walk"
        return self._prepare(job, self._rc)

    def submitted(self, job: SweepJob, request: JobRequest) -> None:
        self._pending[request.task.key] = (job, request)

    def _take_reports(self, runtime_context: RuntimeContext) -> None:
        assert self.coordinator is not None
        for report in self.coordinator.wait_reports(set(self._pending), WAIT_S):
            job, request = self._pending.pop(report.key)
            self._finish(job, request, report, runtime_context)

    # -- one job -----------------------------------------------------------------------------
    def _prepare(self, job: SweepJob, rc: RuntimeContext) -> JobRequest:
        """Lay out the job as cwltool would before running it, and describe it for the
        coordinator; raises WorkflowException on a bad annotation, before the batch runs."""
        os.makedirs(job.tmpdir, exist_ok=True)
        job._setup(rc)
        argv, env, reads = self._command(job, rc)
        shown = " ".join(argv)  # before secrets are filled in: a log never shows them
        store, secrets = rc.secret_store, []
        if store is not None and (store.has_secret(argv) or store.has_secret(env)):
            # the values behind this command's placeholders: its worker blanks them out of the
            # log tail and reason it reports (a command may print what it was given)
            parts = [*argv, *env.values()]
            secrets = sorted({value for placeholder, value in store.secrets.items()
                              if any(placeholder in part for part in parts)})
            argv, env = store.retrieve(argv), store.retrieve(env)
        if not argv:
            raise WorkflowException(f"[job {job.name}] an empty command line: give the tool a "
                                    "baseCommand, arguments or a bound input")
        key = f"c{next(self._keys)}"
        task, family, deadline = self._describe(job, key)
        self.started()
        stage = {"stdin": _stdin_path(job, self.staging is not None
                                      and not isinstance(job, ContainerCommandLineJob)),
                 "stdout": os.path.join(job.base_path_logs, job.stdout) if job.stdout else None,
                 "stderr": os.path.join(job.base_path_logs, job.stderr) if job.stderr else None,
                 "outdir": job.outdir, "timelimit": deadline,
                 "success_codes": sorted({0, *job.successCodes}),
                 "host_env": isinstance(job, ContainerCommandLineJob)}
        if self.staging is not None:
            try:
                stage.update(self.staging.manifest(key, reads, job.outdir, job.tmpdir))
            except (OSError, ValueError) as exc:
                raise WorkflowException(f"[job {job.name}] cannot stage its files: {exc}") from None
        _logger.info("[job %s] %s on expocloud: %s", job.name, task.label, shown)
        # the command reaches the bucket only sealed for its worker (as every job's does)
        sweep = job.tool.sweep
        spec = None if family is None or sweep is None else ModelSpec(
            sweep.noise or self.noise, sweep.spec)
        return job_request(task, argv, job.outdir, env, deadline, stage=stage, redact=secrets,
                           family=family, meta=_meta(job, task), model_spec=spec)

    def _command(self, job: SweepJob,
                 rc: RuntimeContext) -> tuple[list[str], dict[str, str], list[tuple[str, bool]]]:
        """The job's command and environment, and what of this machine it reads (cwltool's
        path mapper entries as (path, staged), or a container's mount sources), laid out."""
        if not isinstance(job, ContainerCommandLineJob):
            _stage_bare(job, rc)
            return ([str(a) for a in job.command_line], dict(job.environment),
                    [(entry.target, entry.staged) for _, entry in _mapped(job)])
        if self.staging_root is not None:
            _inputs_under(job, self.staging_root)
        argv = _container_command(job, rc)  # the job's variables are --env flags in it
        return argv, {}, [(source, True) for source in _mount_sources(argv)]

    def _describe(self, job: SweepJob, key: str) -> tuple[Task, FamilyRef | None, float | None]:
        tool = job.tool
        values = job.builder.job
        limit = job.timelimit if job.timelimit and job.timelimit > 0 else None
        deadline = float(limit) if limit else (tool.sweep.deadline_s if tool.sweep else None)
        cores = math.ceil(float(job.builder.resources.get("cores", 1)))
        ram = math.ceil(float(job.builder.resources.get("ram", 0)))
        misfit = self.misfit(max(1, cores), ram)
        if misfit is not None and misfit.resource == "cpus":
            raise WorkflowException(
                f"[job {job.name}] ResourceRequirement asks for {cores} cores but workers have "
                f"{self.slots} slots; fix: set --expocloud-slots-per-worker {cores} or lower "
                "coresMin")
        if misfit is not None:
            raise WorkflowException(
                f"[job {job.name}] ResourceRequirement asks for {ram} MiB of RAM but workers "
                f"have {self.worker_mem_mb} MiB; fix: lower ramMin or give workers more memory "
                "(--expocloud-gce-machine-type)")
        point = family = None
        label = job.name
        if tool.sweep is not None:
            setting = f"hint expo:Hardness of {tool.name}"
            try:
                point = tool.sweep.point(values, setting)
            except ExpoError as exc:
                raise WorkflowException(str(exc)) from None
            label = f"{tool.name} {tool.sweep.describe(values)}"
            if deadline is not None:
                family = FamilyRef(self.workflow, tool.name, tool.sweep.spec.text, deadline,
                                   *self.measured_on)
        attempts = tool.spot_attempts
        shape = Shape(self.labelled_machine, labels=tool.labels) \
            if self.labelled_machine and tool.labels else None
        params = {k: param_text(v) for k, v in values.items()
                  if isinstance(v, (str, int, float, bool))} if family else {}
        task = Task(key=key, label=label, family=family.key if family else None,
                    point=point if family else None, cpus=max(1, cores), mem_mb=ram,
                    preemptible=attempts != 0, spot_attempts=attempts, shape=shape,
                    params=params, deadline_s=deadline if family else None,
                    skip=tool.sweep.skip if family and tool.sweep else None)
        return task, family, deadline

    def _finish(self, job: SweepJob, request: JobRequest, report: JobReport,
                rc: RuntimeContext) -> None:
        """Bring the outputs back, collect them as cwltool would, and tell the workflow."""
        skipped = report.outcome in (Outcome.SKIPPED, Outcome.MODEL_SKIPPED) or (
            report.outcome is Outcome.TIMEOUT and job.tool.sweep is not None
            and self.on_timeout == "skipped")
        if skipped:  # the coordinator's timeout line summarizes it (coordinator/reports.py)
            _logger.debug("[job %s] %s: %s", job.name, request.task.label, report.message)
            outputs: CWLObjectType = {name: None for name in job.tool.output_names}
            status = "skipped"
        else:
            outputs, status = self._collect(job, request, report, rc)
        with rc.workflow_eval_lock:  # type: ignore[union-attr]
            job.output_callback(outputs, status)  # type: ignore[misc]
        if rc.rm_tmpdir:
            for path in (job.stagedir, job.tmpdir):
                if path:
                    shutil.rmtree(path, True)

    def _collect(self, job: SweepJob, request: JobRequest, report: JobReport,
                 rc: RuntimeContext) -> tuple[CWLObjectType, str]:
        rcode = report.returncode
        saved = f" (its whole log: {report.logs_dir}/)" if report.logs_dir else ""
        if report.outcome is Outcome.TIMEOUT:
            _logger.warning("[job %s] exceeded time limit: %s%s", job.name, report.message, saved)
            status = "permanentFail"
        elif rcode is None:
            _logger.error("[job %s] %s%s", job.name, report.message, saved)
            status = "permanentFail"
        else:
            status = _status(job, rcode)
            if status != "success":
                _logger.warning("[job %s] exited with status: %d%s\n%s", job.name, rcode, saved,
                                report.log_tail)
        outputs: CWLObjectType = {}
        try:
            if self.staging is not None and report.worker is not None:
                self.staging.fetch(request.spec.stage["upload"], report.worker, job.outdir)
            if job.generatemapper is not None:
                relink_initialworkdir(job.generatemapper, job.outdir, job.builder.outdir,
                                      inplace_update=job.inplace_update)
            outputs = bytes2str_in_dicts(job.collect_outputs(job.outdir, -1 if rcode is None
                                                             else rcode))  # type: ignore
        except (OSError, ValueError, WorkflowException) as exc:  # ValueError: a bad manifest
            _logger.error("[job %s] Job error:\n%s", job.name, exc)
            status = "permanentFail"
        _logger.log(logging.INFO if status == "success" else logging.WARNING,
                    "[job %s] completed %s", job.name, status)
        return outputs, status


def _stage_bare(job: SweepJob, rc: RuntimeContext) -> None:
    """Lay out a bare command's inputs where its command line names them (links)."""
    stage_files(job.pathmapper, ignore_writable=True, symlink=True,
                secret_store=rc.secret_store)
    if job.generatemapper is not None:
        stage_files(job.generatemapper, ignore_writable=job.inplace_update, symlink=True,
                    secret_store=rc.secret_store)
        relink_initialworkdir(job.generatemapper, job.outdir, job.builder.outdir,
                              inplace_update=job.inplace_update)


def _inputs_under(job: ContainerCommandLineJob, root: Path) -> None:
    """Bucket staging uploads only what lies under the job root, which a worker rebuilds on
    its own disk: a container job's inputs elsewhere get a link under the root, and its mounts
    name the link (on the worker, the copy made there)."""
    place = None
    for key, entry in list(job.pathmapper.items()):
        if not entry.staged or entry.type not in ("File", "Directory") \
                or entry.resolved.startswith("_:") \
                or os.path.abspath(entry.resolved).startswith(f"{root}{os.sep}"):
            continue
        place = place or tempfile.mkdtemp(prefix="inputs-", dir=root)
        link = os.path.join(tempfile.mkdtemp(dir=place),
                            os.path.basename(entry.resolved.rstrip("/")))
        os.symlink(entry.resolved, link)
        job.pathmapper.update(key, link, entry.target, entry.type, entry.staged)


def _mount_sources(argv: list[str]) -> list[str]:
    """The paths of this machine a container command mounts (cwltool's
    ``--mount=type=bind,source=S,target=T[,readonly]``)."""
    return [part.removeprefix("source=") for arg in argv if arg.startswith("--mount=")
            for part in arg.removeprefix("--mount=").split(",") if part.startswith("source=")]


def _container_command(job: ContainerCommandLineJob, rc: RuntimeContext) -> list[str]:
    """cwltool's own container command (``docker|podman run`` with its mounts, --env flags,
    --net=none...), the image named as the requirement names it: the worker's runtime pulls
    it when it lacks it, not this machine. Two flags are dropped: --cidfile (nothing here
    watches the container) and podman's --userns=keep-id, which rootful podman refuses (as
    root the container's user is already the caller's)."""
    req, _ = job.get_requirement("DockerRequirement")
    image = (req or {}).get("dockerImageId") or (req or {}).get("dockerPull")
    if not image:
        raise WorkflowException(f"[job {job.name}] DockerRequirement names no image: give it "
                                "dockerPull (or dockerImageId)")
    runtime, _ = job.create_runtime({}, rc)
    drop = {"--userns=keep-id"} if os.geteuid() == 0 else set()
    runtime = [a for a in runtime if a not in drop and not a.startswith("--cidfile=")]
    return [*runtime, str(image), *(str(a) for a in job.command_line)]


def _status(job: SweepJob, rcode: int) -> str:
    """CWL's reading of an exit code (successCodes, temporaryFailCodes, permanentFailCodes)."""
    if rcode in job.successCodes:
        return "success"
    if rcode in job.temporaryFailCodes:
        return "temporaryFail"
    if rcode in job.permanentFailCodes:
        return "permanentFail"
    return "success" if rcode == 0 else "permanentFail"


def _stdin_path(job: SweepJob, staged: bool) -> str | None:
    """cwltool reads stdin from the file's source; a worker reads the copy staged for it."""
    if job.stdin is None:
        return None
    entry = job.pathmapper.reversemap(job.stdin)
    if entry is None:
        raise WorkflowException(f"{job.stdin} missing from pathmapper")
    return job.stdin if staged else entry[1]


def _mapped(job: SweepJob) -> list:
    items = list(job.pathmapper.items())
    if job.generatemapper is not None:
        items += list(job.generatemapper.items())
    return items


def _meta(job: SweepJob, task: Task) -> JobMeta:
    """The run record of a job, in the Snakemake front end's terms (its simple inputs as
    wildcards), so that ``expocloud report`` reads CWL runs too."""
    sweep = job.tool.sweep
    values = job.builder.job
    hardness = None if sweep is None or task.point is None else HardnessMeta(
        sweep.spec.text, tuple(d.name for d in sweep.spec.dimensions),
        tuple(task.point.vector), tuple(task.point.scope))
    return JobMeta(job.tool.name, {k: str(v) for k, v in values.items()
                                   if isinstance(v, (str, int, float, bool))},
                   hardness=hardness, job=job.name)
