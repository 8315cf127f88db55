"""Engines create, delete and list a run's VMs: the paper's engine interface, nothing more.

``base`` is the contract, ``local`` runs workers as local processes, ``gce`` is the Compute
Engine provider package. Engines may import the core and the protocol (and ``local`` the worker's
process control, ``gce.launch`` the coordinator's settings, which it turns into a GCE engine);
never the rest of the coordinator, the worker's agent or the front ends.
"""

from expo_executor.engines.base import Engine, Instance

__all__ = ["Engine", "Instance"]
