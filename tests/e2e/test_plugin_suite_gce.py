"""Snakemake's own executor-plugin suite through the emulated GCE path: no shared file system,
inputs and outputs in the (emulated) GCS bucket, each test in a storage prefix of its own."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Optional

import pytest
import snakemake.common.tests
from snakemake_interface_common.plugin_registry.plugin import TaggedSettings
from snakemake_interface_executor_plugins.settings import ExecutorSettingsBase

from expo_executor.emulator.compute import FakeCompute
from expo_executor.coordinator.settings import ExecutorSettings

from tests.emulated_gce import PROJECT, WORKER, ZONES
from tests.gcs_emulator import fresh_bucket, gcs_emulator  # noqa: F401


class TestWorkflowsEmulatedGce(snakemake.common.tests.TestWorkflowsBase):
    __test__ = True

    @pytest.fixture(autouse=True)
    def _emulated_cloud(self, tmp_path: Path, gcs_emulator: str,  # noqa: F811
                        monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_emulator)
        monkeypatch.chdir(tmp_path)  # the run's .expocloud state lands in the test's directory
        self.fake = FakeCompute(tmp_path / "fake-vms", boot_delay=0.2, notice_s=0.5).start()
        self.prefix = f"gs://{fresh_bucket(gcs_emulator)}/{uuid.uuid4().hex[:8]}"
        try:
            yield
        finally:
            self.fake.stop()
        assert not [i for i in self.fake.instances().values() if i["status"] == "RUNNING"]

    def get_executor(self) -> str:
        return "expocloud"

    def get_executor_settings(self) -> Optional[ExecutorSettingsBase]:
        return ExecutorSettings(engine="gce", gce_endpoint=self.fake.endpoint,
                                gce_project=PROJECT, gce_zones=ZONES, max_workers=2,
                                gce_service_account=WORKER,
                                gce_worker_software="image", poll_interval=0.2,
                                slow_poll_interval=2.0,
                                heartbeat_grace=30.0, idle_timeout=2.0)

    def get_assume_shared_fs(self) -> bool:
        return False

    def get_envvars(self) -> list[str]:
        return ["STORAGE_EMULATOR_HOST"]

    def get_default_storage_provider(self) -> Optional[str]:
        return "gcs"

    def get_default_storage_prefix(self) -> Optional[str]:
        return self.prefix

    def get_default_storage_provider_settings(self) -> Optional[dict[str, TaggedSettings]]:
        from snakemake_storage_plugin_gcs import StorageProviderSettings

        tagged = TaggedSettings()
        tagged.register_settings(StorageProviderSettings(project=PROJECT))
        return {"gcs": tagged}
