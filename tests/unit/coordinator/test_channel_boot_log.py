"""What the coordinator shows of a failed VM's boot log (coordinator/channel.py): the last lines
the startup script left in the bucket, as text that can do no harm in a terminal."""

from __future__ import annotations

from pathlib import Path

from expo_executor.coordinator.channel import BOOT_LOG_CHARS, BOOT_LOG_LINES, Channel
from expo_executor.protocol.bucket import LocalBucket
from expo_executor.protocol.keys import boot_log_key


def _channel(tmp_path: Path) -> tuple[Channel, LocalBucket]:
    bucket = LocalBucket(tmp_path / "bucket")
    return Channel(bucket, b"k" * 32, lambda _line: None), bucket


def test_the_last_lines_joined_and_control_characters_blanked(tmp_path: Path) -> None:
    channel, bucket = _channel(tmp_path)
    lines = [f"line {i}" for i in range(30)] + ["", "ERROR: \x1b[31mred\x1b[0m \x07bell"]
    bucket.write(boot_log_key("vm-1"), "\n".join(lines).encode())
    shown = channel.boot_log("vm-1")
    parts = shown.split(" | ")
    assert len(parts) == BOOT_LOG_LINES and parts[0] == "line 23"
    assert parts[-1] == "ERROR:  [31mred [0m  bell"  # no escape sequence reaches a terminal
    assert "\x1b" not in shown and "\x07" not in shown


def test_a_huge_or_binary_log_is_capped_and_a_missing_one_is_empty(tmp_path: Path) -> None:
    channel, bucket = _channel(tmp_path)
    assert channel.boot_log("vm-2") == ""
    bucket.write(boot_log_key("vm-2"), b"\xff\xfe" + b"x" * 100_000)
    assert len(channel.boot_log("vm-2")) == BOOT_LOG_CHARS
