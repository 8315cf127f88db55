"""Snakemake discovers ``--executor expocloud`` here; the code lives in ``expo_executor``."""

from expo_executor.settings import ExecutorSettings
from expo_executor.snakemake_executor import Executor, common_settings

__all__ = ["ExecutorSettings", "Executor", "common_settings"]
