"""Engines create, delete and list a run's VMs: the paper's engine interface, nothing more.

``base`` is the contract, ``local`` runs workers as local processes (``local_settings``: its
own settings and checks), ``gce`` is the Compute Engine provider package. Engines may import the
core, the protocol and the leaves they share with other layers (``gcp``: Google's error
classifier and retry; ``processes``: OS process sessions, with which ``local`` powers its
workers off; ``settings``: the settings every engine reads, which an engine's own fields
extend); never the coordinator, the worker or the front ends.
"""

from expo_executor.engines.base import Engine, Instance

__all__ = ["Engine", "Instance"]
