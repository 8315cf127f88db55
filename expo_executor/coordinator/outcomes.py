"""How a job's end reads: the ``JobReport`` a front end gets (with the sentence a user reads) and
the ``jobs.jsonl`` record the run keeps. Pure functions of the scheduler's event, the request and
the worker's result.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from expo_executor.coordinator.requests import JobReport, JobRequest
from expo_executor.core.hardness import FrontierPoint
from expo_executor.core.run_status import predicted
from expo_executor.core.runtime_model import RuntimePrediction
from expo_executor.core.scheduler import Finished, ModelSkipped, Outcome, Pool, Skipped
from expo_executor.protocol.records import WorkerResult


def finished(event: Finished, request: JobRequest, result: WorkerResult | None) -> JobReport:
    """A job that ran to an outcome: solved, failed, or timed out (which skips harder ones)."""
    runtime = result.runtime_s if result else None
    worker = result.worker if result else None
    if event.outcome is Outcome.TIMEOUT:
        ran = result.timed_s if result else runtime
        again = f", as on {event.first_timeout_on} before" if event.first_timeout_on else ""
        message = (f"timed out after {ran or 0:.0f} s (deadline {request.spec.deadline_s:g} s"
                   f"{again}); {event.harder} harder "
                   f"combination{'s' if event.harder != 1 else ''} will be skipped")
    elif event.outcome is Outcome.SOLVED:
        message = f"solved in {runtime or 0:.1f} s on {worker}"
        if event.first_timeout_on:
            message += (f" (its first run timed out on {event.first_timeout_on}: a slow "
                        "worker, not a hard combination)")
    else:
        reason = result.reason if result else "unknown reason"
        message = f"failed on worker {worker}: {reason}"
    return JobReport(event.key, event.outcome, message, runtime, worker,
                     result.log_tail if result else "",
                     returncode=result.returncode if result else None,
                     first_timeout_on=event.first_timeout_on)


def skipped(event: Skipped, result: WorkerResult | None) -> JobReport:
    """A job dominated by one that timed out (killed, if it was running)."""
    message = (f"skipped: as hard as or harder than {event.dominator.label}, "
               "which timed out" + (" (killed while running)" if event.killed else ""))
    ran = result is not None and result.ran
    return JobReport(event.key, Outcome.SKIPPED, message, result.runtime_s if ran else None,
                     result.worker if ran else None, killed=event.killed)


def model_skipped(event: ModelSkipped, request: JobRequest) -> JobReport:
    """A job the runtime model judged hopeless: never run. Its sentence says how likely it
    was to pass its deadline, the setting that skipped it (the run's, or its tool's hint), and
    how to run it after all."""
    p = event.prediction
    message = (f"model-skipped: {event.probability:.1%} likely to run past its deadline of "
               f"{request.spec.deadline_s or 0:g} s (predicted {predicted(p.median_s)}, 90% "
               f"{predicted(p.low_s).removesuffix(' s')} to {predicted(p.high_s)}), at or above "
               f"{event.rule.text}; not run (a rerun with a higher {event.rule.setting}, or "
               "without it, runs it)")
    return JobReport(event.key, Outcome.MODEL_SKIPPED, message)


def job_record(report: JobReport, request: JobRequest, result: WorkerResult | None,
               dominator: FrontierPoint | None, pool: Pool | None, preemptions: int,
               ended: float, run_dir: Path | None = None,
               prediction: RuntimePrediction | None = None) -> dict[str, Any]:
    """The job's line in ``jobs.jsonl``; its saved logs directory (if any) relative to
    ``run_dir``, so that a moved state directory still finds them. ``prediction``: the runtime
    model's, as the job was taken in (the report sets it against the runtime); a model skip's
    ``p_exceed`` is the probability that skipped it."""
    logs_dir = report.logs_dir
    if logs_dir is not None and run_dir is not None and logs_dir.is_relative_to(run_dir):
        logs_dir = logs_dir.relative_to(run_dir)
    return {
        "v": 1, "key": report.key, **request.meta.to_dict(), "outcome": report.outcome.value,
        "killed": report.killed, "runtime_s": report.runtime_s, "worker": report.worker,
        "cpus": request.task.cpus,  # the slots it held there: the bill by rule (rule_split)
        "started": result.started if result and result.ran else None, "ended": ended,
        # the deadline's clock: the command's own seconds, and the start-up and file staging
        # around it (None: the job left no stamps, and its deadline timed the whole job)
        "command_s": result.command_s if result else None,
        "overhead_s": round(result.overhead_s, 3) if result and result.overhead_s is not None
        else None,
        # bytes it read from and wrote to the bucket: egress when its VM is in another region
        # than the bucket (cost/cost_report.py prices them at its VM's rate)
        "staged_down_bytes": result.staged.down if result else 0,
        "staged_up_bytes": result.staged.up if result else 0,
        "deadline_s": request.spec.deadline_s, "reason": report.message,
        "dominator": dominator.label if dominator else None,
        "pool": pool.value if pool is not None else None,
        "preemptions": preemptions,
        "first_timeout_on": report.first_timeout_on,
        "logs_dir": str(logs_dir) if logs_dir is not None else None,
        # None where the model has no finite figure (it predicts the job never finishes):
        # JSON has no infinity
        "predicted_s": finite(prediction.median_s) if prediction else None,
        "predicted_low_s": finite(prediction.low_s) if prediction else None,
        "predicted_high_s": finite(prediction.high_s) if prediction else None,
        "p_exceed": prediction.p_exceed if prediction else None,
    }


def finite(value: float) -> float | None:
    """A figure for JSON, which has no infinity or NaN: None for those."""
    return value if math.isfinite(value) else None
