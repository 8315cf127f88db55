"""Snakemake discovers ``--executor expocloud`` here; the code lives in ``expo_executor``."""

from dataclasses import dataclass

from snakemake_interface_common.exceptions import WorkflowError
from snakemake_interface_common.logging import get_logger

from expo_executor.coordinator.settings import ExecutorSettings as _Settings
from expo_executor.coordinator.settings import validate
from expo_executor.core.errors import ExpoError
from expo_executor.core.records import EngineName
from expo_executor.engines.gce.settings import needs_credentials
from expo_executor.engines.gce.settings_checks import check_credentials
from expo_executor.frontends.process_exit import interrupt_at_once, skip_exit_collection
from expo_executor.frontends.snakemake import storage_listing
from expo_executor.frontends.snakemake.executor import Executor, common_settings
from expo_executor.worker import checkpoint_copies


@dataclass
class ExecutorSettings(_Settings):
    """The settings as Snakemake builds them from its command line and profiles.

    Snakemake builds these before any storage provider: a GCE run's credentials are checked
    here, so a bad key file is our one-line error and not a traceback from the GCS storage
    plugin (which asks google-auth first otherwise). It is also the first moment we know the
    run is ours, in its main process and before any storage object: Snakemake's existence
    checks in the GCS default storage are answered from one listing of its prefix from here on
    (``storage_listing``); a finished checkpoint's storage outputs are fetched to their
    local copies when an input function asks for them, as the job ran elsewhere
    (``worker/checkpoint_copies.py``); and from here on Ctrl-C interrupts at once, also while
    Snakemake builds its DAG, and the process ends without a last garbage collection of that
    DAG (``process_exit``).
    """

    def __post_init__(self) -> None:
        interrupt_at_once()
        skip_exit_collection()
        checkpoint_copies.install()
        unchanged = storage_listing.install()
        if unchanged and self.engine == EngineName.GCE:  # the engine whose files are in GCS
            get_logger().warning(unchanged)
        if needs_credentials(self):
            try:
                validate(self)  # a wrong setting is the first thing to fix
                check_credentials()
            except ExpoError as exc:
                raise WorkflowError(str(exc)) from None


__all__ = ["ExecutorSettings", "Executor", "common_settings"]
