"""The retry helper (engines/gce/retry.py) backs off as documented: full jitter under a cap,
a bounded number of attempts, and a non-transient error raised at once. Deterministic: the
sleeps and the random draws are injected."""

from __future__ import annotations

import pytest

from expo_executor.gcp.retry import retry_call


class Transient(Exception):
    pass


class Fatal(Exception):
    pass


def _failing(errors: list[Exception], result: str = "ok"):  # type: ignore[no-untyped-def]
    calls = []

    def fn() -> str:
        calls.append(1)
        if errors:
            raise errors.pop(0)
        return result

    return fn, calls


def _transient(err: BaseException) -> bool:
    return isinstance(err, Transient)


def test_retry_delays_grow_and_are_capped() -> None:
    sleeps: list[float] = []
    fn, calls = _failing([Transient() for _ in range(7)])
    assert retry_call(fn, is_transient=_transient, attempts=8, base=0.1, cap=1.0,
                      sleep=sleeps.append, rand=lambda: 1.0) == "ok"
    assert len(calls) == 8
    assert sleeps == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0])


def test_retry_full_jitter_scales_the_ceiling() -> None:
    sleeps: list[float] = []
    fn, _ = _failing([Transient(), Transient(), Transient()])
    draws = iter([0.5, 0.0, 0.25])
    retry_call(fn, is_transient=_transient, attempts=5, base=0.1, cap=30,
               sleep=sleeps.append, rand=lambda: next(draws))
    assert sleeps == pytest.approx([0.05, 0.0, 0.1])


def test_non_transient_raises_at_once() -> None:
    sleeps: list[float] = []
    fn, calls = _failing([Fatal("403")])
    with pytest.raises(Fatal):
        retry_call(fn, is_transient=_transient, attempts=5, base=0.1, cap=30,
                   sleep=sleeps.append, rand=lambda: 1.0)
    assert len(calls) == 1 and sleeps == []


def test_attempt_bound_holds() -> None:
    sleeps: list[float] = []
    errors = [Transient(str(i)) for i in range(10)]
    fn, calls = _failing(errors)
    with pytest.raises(Transient) as info:
        retry_call(fn, is_transient=_transient, attempts=3, base=0.1, cap=30,
                   sleep=sleeps.append, rand=lambda: 1.0)
    assert len(calls) == 3 and str(info.value) == "2" and len(sleeps) == 2
    with pytest.raises(ValueError):
        retry_call(fn, is_transient=_transient, attempts=0)
