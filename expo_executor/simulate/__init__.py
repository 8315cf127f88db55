"""``expocloud simulate``: the real scheduler and fleet policy under simulated time.

It may import the core and cost (and, for loading past runs, the report's readers); never the
coordinator's I/O, engines or front ends: it takes decisions through the same pure functions.
"""
