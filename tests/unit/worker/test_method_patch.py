"""Wrapping a method once per process, or leaving it as it is (worker/method_patch.py)."""

from __future__ import annotations

from expo_executor.worker.method_patch import Wrap, not_found, wrap_once

MARK = "_test_mark"


def loud(method):
    def wrapper(self):
        return method(self).upper()
    return wrapper


def make_owner() -> type:
    class Owner:
        def name(self) -> str:
            return "snake"

        def other(self) -> str:
            return "make"
    return Owner


def test_each_method_is_wrapped_and_marked_once() -> None:
    owner = make_owner()
    wraps = [Wrap(owner, "name", loud), Wrap(owner, "other", loud)]
    assert wrap_once(wraps, MARK, "names") is None
    first = owner.name
    assert (owner().name(), owner().other()) == ("SNAKE", "MAKE")
    assert getattr(owner.name, MARK) and getattr(owner.other, MARK)
    assert wrap_once(wraps, MARK, "names") is None  # a second install: nothing more
    assert owner.name is first and owner().name() == "SNAKE"


def test_what_is_not_expected_is_left_as_it_is() -> None:
    owner = make_owner()
    before = owner.name
    why = wrap_once([Wrap(owner, "name", loud)], MARK, "names", expected=False)
    assert why == "Snakemake's names: not the expected methods" and owner.name is before
    owner.other = None  # no longer a method: neither is wrapped
    why = wrap_once([Wrap(owner, "name", loud), Wrap(owner, "other", loud)], MARK, "names")
    assert why is not None and owner.name is before


def test_a_missing_method_is_a_reason_not_an_error() -> None:
    owner = make_owner()
    assert wrap_once([Wrap(owner, "gone", loud)], MARK, "gone") is not None
    assert not_found("x", ImportError("no")) == "cannot find Snakemake's x (ImportError: no)"
