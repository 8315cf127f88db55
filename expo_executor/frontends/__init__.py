"""The front ends: Snakemake's executor plugin and the CWL runner, thin adapters that turn their
engine's jobs into the coordinator's requests and its reports back into their engine's terms.

``base`` is what both share: a template method whose one hook, ``describe(job)``, each front
end implements (and ``process_exit``: their process ends promptly, without a last garbage
collection). They may import everything below them (core, protocol, coordinator, cost, the
``runs`` and ``settings`` leaves, the GCE engine's launch and settings, and the worker's path
check that the CWL staging shares); nothing imports them but the plugin shim and the command
line.
"""
