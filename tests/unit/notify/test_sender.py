"""The sender: the run's thread only queues; one thread sends, retries, gives up in one line,
and the run's end flushes for a bounded time, even past a receiver that hangs. Targets here
are in-process stand-ins (the real webhook and command: tests/e2e/test_notify_receiver_runs.py)."""

from __future__ import annotations

import json
import threading

from expo_executor.core import notices
from expo_executor.core.notices import RunEnd
from expo_executor.notify.sender import Notifier, Pace, backoff, body_of
from expo_executor.notify.targets import SendFailed

FAST = Pace(call_timeout=1.0, attempts=3, backoff_s=0.0, flush_s=5.0, queue=4)


class Recorder:
    """Fails its first ``failures`` calls (``retry`` as given), then records the bodies."""

    def __init__(self, failures: int = 0, retry: bool = True,
                 error: Exception | None = None) -> None:
        self.name = "recorder"
        self.failures, self.retry, self.error = failures, retry, error
        self.calls = 0
        self.bodies: list[dict] = []

    def send(self, body: bytes, timeout: float) -> None:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error or SendFailed("HTTP 503", self.retry)
        self.bodies.append(json.loads(body))


class Hanging:
    """Never answers until released, as a receiver that accepts and then says nothing."""

    name = "hanging"

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def send(self, body: bytes, timeout: float) -> None:
        self.entered.set()
        self.release.wait()


def _end(run: str = "r") -> notices.Notice:
    return notices.run_end(run, 1.0, RunEnd({"solved": 1}, None, None, 2.0))


def test_every_notice_reaches_every_target_by_the_end() -> None:
    first, second, lines = Recorder(), Recorder(), []
    notifier = Notifier([first, second], lines.append, FAST)
    notifier.post(notices.first_failure("r", 0.0, "a", "boom"))
    notifier.post(_end())
    notifier.close()
    for target in (first, second):
        assert [b["event"] for b in target.bodies] == ["first_failure", "run_end"]
    assert lines == []


def test_a_failure_is_retried_then_given_up_on_in_one_line() -> None:
    flaky, dead, lines = Recorder(failures=2), Recorder(failures=99), []
    notifier = Notifier([flaky, dead], lines.append, FAST)
    notifier.post(_end())
    notifier.close()
    assert flaky.calls == 3 and len(flaky.bodies) == 1
    assert dead.calls == 3 and dead.bodies == []
    assert lines == ["expocloud: notification run_end to recorder not sent after 3 attempts: "
                     "HTTP 503"]


def test_a_refusal_that_cannot_pass_later_is_not_retried() -> None:
    refused, lines = Recorder(failures=99, retry=False), []
    notifier = Notifier([refused], lines.append, FAST)
    notifier.post(_end())
    notifier.close()
    assert refused.calls == 1 and "after 1 attempt:" in lines[0]


def test_an_unexpected_error_of_a_target_is_a_failure_not_a_dead_sender() -> None:
    broken, lines = Recorder(failures=1, error=RuntimeError("bug")), []
    notifier = Notifier([broken], lines.append, FAST)
    notifier.post(_end())
    notifier.close()
    assert len(broken.bodies) == 1 and lines == []


def test_a_hanging_receiver_holds_neither_post_nor_close() -> None:
    hanging, lines = Hanging(), []
    notifier = Notifier([hanging], lines.append,
                        Pace(call_timeout=1.0, attempts=1, backoff_s=0.0, flush_s=0.2, queue=2))
    notifier.post(_end())
    assert hanging.entered.wait(30), "the sender never called the target"
    for _ in range(5):  # a full queue drops, said once; posting never blocks
        notifier.post(_end())
    notifier.close()
    hanging.release.set()
    assert lines == ["expocloud: 2 notifications are waiting to be sent; newer ones are "
                     "dropped until they are",
                     "expocloud: notifications not sent within 0.2 s of the run's end are "
                     "dropped (is the receiver down or hanging?)"]


def test_what_the_end_wait_cuts_short_is_said_dropped_however_the_last_call_ends() -> None:
    """A receiver that answers nothing until its call's time is up, with the run's end coming
    during that call: the sender then gives up at the end's deadline, which can be a moment
    before close() stops waiting or after it; the line is the same either way (here: before)."""
    clock = [0.0]
    lines: list[str] = []
    go = threading.Event()

    class TimesOut(Recorder):
        def send(self, body: bytes, timeout: float) -> None:
            self.calls += 1
            go.wait(30)
            clock[0] += timeout  # it used all the time it was given
            raise SendFailed("timed out", retry=True)

    target = TimesOut()
    notifier = Notifier([target], lines.append,
                        Pace(call_timeout=10.0, attempts=4, backoff_s=0.0, flush_s=5.0),
                        clock=lambda: clock[0])
    notifier.post(_end())
    releaser = threading.Thread(target=lambda: notifier._closing.wait(30) and go.set())
    releaser.start()
    notifier.close()  # the end's wait, to t=5; the call then times out at t=10
    releaser.join()
    assert target.calls == 1 and target.bodies == []
    assert lines == ["expocloud: notifications not sent within 5 s of the run's end are "
                     "dropped (is the receiver down or hanging?)"]


def test_nothing_is_sent_after_close_and_close_twice_is_harmless() -> None:
    target = Recorder()
    notifier = Notifier([target], lambda line: None, FAST)
    notifier.close()
    notifier.post(_end())
    notifier.close()
    assert target.calls == 0


def test_the_backoff_doubles_and_the_body_is_the_notice() -> None:
    pace = Pace(backoff_s=1.5)
    assert [backoff(pace, attempt) for attempt in range(3)] == [1.5, 3.0, 6.0]
    assert json.loads(body_of(_end("x"))) == _end("x").to_dict()
