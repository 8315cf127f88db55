"""The one error type users see: a single line naming the setting and the fix."""

from __future__ import annotations


class ExpoError(Exception):
    """A user-facing configuration or input error.

    The message is one line: what is wrong, which setting holds it, and how to fix it.
    Raised before anything is provisioned so that nothing is lost and nothing keeps running.
    """

    def __init__(self, setting: str, problem: str, fix: str) -> None:
        self.setting = setting
        self.problem = problem
        self.fix = fix
        super().__init__(f"{setting}: {problem}; fix: {fix}")
