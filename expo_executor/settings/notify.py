"""The notification settings a run uses, checked before anything is provisioned: the URL
(HTTPS, or HTTP to this machine only: a notification says what a run costs and does, and its
signature proves only who sent it, not that nobody read it), the command (split, found), the
signing secret (from a file or the environment; required with a URL) and the stall time.

Each refusal is one line naming the setting and the fix; none of them repeats the URL's path or
the secret (a Slack webhook's path is its secret).
"""

from __future__ import annotations

import math
import os
import shlex
import shutil
import urllib.parse
from pathlib import Path

from expo_executor.core.errors import ExpoError
from expo_executor.core.hardness import parse_duration
from expo_executor.core.notices import SECRET_ENV, STALL_AFTER
from expo_executor.settings.fields import Settings

URL_SETTING = "--expocloud-notify"
ENV_PREFIX = "env:"  # --expocloud-notify env:NAME: the URL is in $NAME
LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1"})


def notify_url(settings: Settings) -> str | None:
    """The URL to POST to, or None; ExpoError unless https://, or http:// to this machine.
    ``env:NAME`` reads it from the environment variable NAME: Snakemake writes its command line
    into its log, and a webhook's URL is often its secret."""
    url = (settings.notify or "").strip()
    if not url:
        return None
    if url.startswith(ENV_PREFIX):
        name = url[len(ENV_PREFIX):]
        url = os.environ.get(name, "").strip()
        if not url:
            raise ExpoError(URL_SETTING, f"the environment variable {name!r} is not set",
                            "export it with the URL, or give the URL itself")
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        raise ExpoError(URL_SETTING, "it is not a URL", "give https://HOST/PATH") from None
    if parts.scheme == "http" and parts.hostname in LOOPBACK:
        return url
    if parts.scheme == "https" and not parts.hostname:
        raise ExpoError(URL_SETTING, "the URL has no host", "give https://HOST/PATH")
    if parts.scheme != "https":
        shown = f"{parts.scheme}://{parts.hostname or ''}" if parts.scheme else "it"
        raise ExpoError(URL_SETTING, f"{shown} is not an https:// URL (plain http:// is "
                        "allowed only to localhost)", "give an https:// URL")
    return url


def notify_argv(settings: Settings) -> tuple[str, ...] | None:
    """The command's words, or None; ExpoError if it cannot be split or its program found."""
    line = (settings.notify_command or "").strip()
    if not line:
        return None
    try:
        argv = tuple(shlex.split(line))
    except ValueError as exc:
        raise ExpoError("--expocloud-notify-command", f"cannot split it ({exc})",
                        "quote it as you would in a shell") from None
    if shutil.which(argv[0]) is None:
        raise ExpoError("--expocloud-notify-command", f"{argv[0]!r} is not an executable "
                        "program here", "give a program on PATH or the path of one")
    return argv


def notify_secret(settings: Settings) -> bytes | None:
    """The signing secret: the file's content, else ``$EXPOCLOUD_NOTIFY_SECRET``, stripped;
    None when neither is given. ExpoError if the file cannot be read or is empty."""
    path = settings.notify_secret_file
    if path:
        try:
            secret = Path(path).read_bytes().strip()
        except OSError as exc:
            raise ExpoError("--expocloud-notify-secret-file", f"cannot read {path} "
                            f"({exc.strerror or type(exc).__name__})",
                            "give a readable file holding the secret") from None
        if not secret:
            raise ExpoError("--expocloud-notify-secret-file", f"{path} is empty",
                            "write the secret into it") from None
        return secret
    secret = os.environ.get(SECRET_ENV, "").strip().encode()
    return secret or None


def stall_after(settings: Settings) -> float:
    """Seconds without progress, while workers are alive, that make a run stalled; infinite
    for 'never'."""
    value = settings.stall_after
    if value is None:
        return STALL_AFTER
    if str(value).strip().lower() == "never":
        return math.inf
    return parse_duration(value, "--expocloud-stall-after")


def check_notify(settings: Settings) -> None:
    """Every notification setting's value; a URL needs a secret to sign with."""
    url = notify_url(settings)
    notify_argv(settings)
    secret = notify_secret(settings)
    stall_after(settings)
    if url is not None and secret is None:
        raise ExpoError(URL_SETTING, "there is no secret to sign its POSTs with",
                        f"set the environment variable {SECRET_ENV}, or give "
                        "--expocloud-notify-secret-file (e.g. holding: openssl rand -hex 32)")
