"""The front ends: Snakemake's executor plugin and the CWL runner, thin adapters that turn their
engine's jobs into the coordinator's requests and its reports back into their engine's terms.

They may import everything below them (core, protocol, coordinator, cost, engines' settings);
nothing imports them but the plugin shim and the command line.
"""
