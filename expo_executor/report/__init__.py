"""A run's results for people: the results table, the outcome map, and safe expressions for
``report --filter`` / ``--best``.

Reads run records only; it may import the core and cost; never the coordinator's loop, engines
or front ends.
"""
