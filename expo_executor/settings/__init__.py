"""A run's settings, the configuration every layer reads: the fields every engine has
(``fields``: ``Settings``, the base of the Snakemake plugin's settings class), the per-engine
defaults in one table (``engine_defaults``), the values a run uses, the setting given or its
engine's default (``values``), the checks of those fields (``checks``), and the notification
settings' values and checks (``notify``: the URL, the command, the signing secret, the stall).

A leaf: the engines, the coordinator, the front ends, the simulator and the command line import
it; it imports only the core (and Snakemake's executor-plugin interface, for the base class).
An engine's own fields and checks live in its package (``engines.local_settings``,
``engines.gce.settings`` and ``settings_checks``); ``coordinator.settings`` puts every engine's
fields into the one ``ExecutorSettings`` and runs every check (``validate``).
"""
