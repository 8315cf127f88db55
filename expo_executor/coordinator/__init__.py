"""The coordinator: one run's loop, its protocol I/O, pool health, budget meter, launch and run
records.

It drives the pure core with what the bucket and the engine say, and is what the front ends talk
to. It may import the core, the protocol, the engines, cost and the worker's key layout; never a
front end (front ends import it).
"""
