"""ExpoCloud executor: parameter sweeps with hardness pruning on local processes or cloud VMs."""

__version__ = "0.1.0"
