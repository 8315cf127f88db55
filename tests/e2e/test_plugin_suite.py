"""Snakemake's own executor-plugin suite (simple and group workflows) through expocloud."""

from typing import Optional

import snakemake.common.tests
from snakemake_interface_executor_plugins.settings import ExecutorSettingsBase

from expo_executor.coordinator.settings import ExecutorSettings


class TestWorkflowsLocalEngine(snakemake.common.tests.TestWorkflowsLocalStorageBase):
    __test__ = True

    def get_executor(self) -> str:
        return "expocloud"

    def get_executor_settings(self) -> Optional[ExecutorSettingsBase]:
        return ExecutorSettings(poll_interval=0.1, idle_timeout=2.0)
