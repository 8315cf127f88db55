"""Engines create, delete and list a run's VMs: the paper's engine interface, nothing more."""

from .base import Engine, Instance

__all__ = ["Engine", "Instance"]
