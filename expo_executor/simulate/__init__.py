"""``expocloud simulate``: the real scheduler and fleet policy under simulated time.

It may import the core, cost and the run records' reader (``coordinator.run_files``; the
report's readers, to load past runs); never the coordinator's loop, engines or front ends: it
takes decisions through the same pure functions.
"""
