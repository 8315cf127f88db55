"""The notification settings, refused before any VM in one line that repeats neither the URL's
path nor the secret: HTTPS only (plain HTTP to this machine), a URL needs a secret, a command
must split and be found, the stall time is a duration or 'never'."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from expo_executor.core.errors import ExpoError
from expo_executor.core.notices import SECRET_ENV, STALL_AFTER
from expo_executor.coordinator.settings import ExecutorSettings, validate
from expo_executor.settings.notify import (check_notify, notify_argv, notify_secret, notify_url,
                                           stall_after)

HOOK = "https://hooks.example.com/services/T000/B000/XXXXSECRETPATH"


@pytest.fixture(autouse=True)
def _no_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SECRET_ENV, raising=False)


def _refusal(**fields: object) -> str:
    with pytest.raises(ExpoError) as caught:
        check_notify(ExecutorSettings(**fields))
    line = str(caught.value)
    assert "\n" not in line and "fix:" in line
    assert "SECRETPATH" not in line and "hunter2" not in line
    return line


def test_https_passes_with_a_secret_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SECRET_ENV, " hunter2\n")
    settings = ExecutorSettings(notify=HOOK)
    validate(settings)
    assert notify_url(settings) == HOOK and notify_secret(settings) == b"hunter2"


@pytest.mark.parametrize("url", ["http://localhost:8080/x", "http://127.0.0.1:9/x",
                                 "http://[::1]:9/x"])
def test_plain_http_only_to_this_machine(url: str, tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("hunter2\n")
    settings = ExecutorSettings(notify=url, notify_secret_file=str(secret))
    check_notify(settings)
    assert notify_secret(settings) == b"hunter2"


@pytest.mark.parametrize("url", ["http://hooks.example.com/services/XXXXSECRETPATH",
                                 "ftp://example.com/XXXXSECRETPATH", "hooks.example.com/x",
                                 "https:///XXXXSECRETPATH"])
def test_anything_else_is_refused(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SECRET_ENV, "hunter2")
    assert _refusal(notify=url).startswith("--expocloud-notify: ")


def test_a_url_needs_a_secret_and_a_secret_file_must_hold_one(tmp_path: Path) -> None:
    assert "no secret to sign" in _refusal(notify=HOOK)
    empty = tmp_path / "empty"
    empty.write_text("\n")
    assert "is empty" in _refusal(notify=HOOK, notify_secret_file=str(empty))
    assert "cannot read" in _refusal(notify=HOOK, notify_secret_file=str(tmp_path / "none"))


def test_the_command_is_split_without_a_shell_and_must_exist() -> None:
    settings = ExecutorSettings(notify_command="python3 -c 'import sys; sys.stdin.read()'")
    assert notify_argv(settings) == ("python3", "-c", "import sys; sys.stdin.read()")
    assert "not an executable" in _refusal(notify_command="no-such-program-xyz --flag")
    assert "cannot split" in _refusal(notify_command="python3 'unclosed")


def test_the_stall_time() -> None:
    assert stall_after(ExecutorSettings()) == STALL_AFTER
    assert stall_after(ExecutorSettings(stall_after="90s")) == 90.0
    assert stall_after(ExecutorSettings(stall_after="never")) == math.inf
    assert _refusal(stall_after="soon").startswith("--expocloud-stall-after")


def test_nothing_set_is_nothing_to_send() -> None:
    settings = ExecutorSettings()
    check_notify(settings)
    assert notify_url(settings) is None and notify_argv(settings) is None


def test_the_url_may_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SECRET_ENV, "hunter2")
    monkeypatch.setenv("MY_HOOK", HOOK)
    assert notify_url(ExecutorSettings(notify="env:MY_HOOK")) == HOOK
    assert "'NO_SUCH_HOOK' is not set" in _refusal(notify="env:NO_SUCH_HOOK")
    monkeypatch.setenv("MY_HOOK", "http://hooks.example.com/XXXXSECRETPATH")
    assert "not an https:// URL" in _refusal(notify="env:MY_HOOK")
