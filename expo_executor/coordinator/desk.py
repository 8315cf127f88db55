"""The hand-over between the front ends' threads and the coordinator's loop thread: jobs come in
through :meth:`JobDesk.submit`, reports go out through :meth:`JobDesk.take` and
:meth:`JobDesk.wait`. The only state both sides touch, under one lock.
"""

from __future__ import annotations

import threading

from expo_executor.coordinator.requests import JobReport, JobRequest


class JobDesk:
    """Submitted jobs waiting for the loop, and reports waiting for a front end."""

    def __init__(self) -> None:
        self._submissions: list[JobRequest] = []
        self._reports: dict[str, JobReport] = {}
        self._lock = threading.Lock()
        self._reported = threading.Condition(self._lock)  # a report arrived

    def submit(self, requests: list[JobRequest]) -> None:
        with self._lock:
            self._submissions.extend(requests)

    def take_submissions(self) -> list[JobRequest]:
        """Everything submitted since the last call (the loop's side)."""
        with self._lock:
            submissions, self._submissions = self._submissions, []
        return submissions

    def post(self, report: JobReport) -> None:
        """A job's report, for the front end to take (the loop's side)."""
        with self._lock:
            self._reports[report.key] = report
            self._reported.notify_all()

    def take(self, key: str) -> JobReport | None:
        with self._lock:
            return self._reports.pop(key, None)

    def wait(self, keys: set[str], timeout: float) -> list[JobReport]:
        """Take the reports of any of ``keys``, waiting up to ``timeout`` s for the first."""
        with self._reported:
            self._reported.wait_for(lambda: not keys.isdisjoint(self._reports), timeout)
            return [self._reports.pop(k) for k in keys & self._reports.keys()]
