"""The pure core: hardness, the scheduler (``scheduler``, with its parts ``tasks``, ``placing``,
``free_slots``, ``held_tasks``, ``pruning``), prefetch's rules for a worker's held jobs
(``held_jobs``, which the worker agent follows too), the fleet policy, pool health, one scaling
round, a coordinator round's decisions (``one_round``, for the coordinator and the simulator
alike), budget phases, which notices are due and what they say (``notices``), the grammar of the
user's pinned worker requirements, and the typed records that cross module borders.

Owns every scheduling decision of a run; it is driven by events and answers with decisions, so
the coordinator and the simulator run the same code. It may import only the standard library's
pure parts and itself: no files, sockets, clocks, threads, subprocesses, clouds or front ends
(tests/unit/test_architecture.py holds it to that).
"""
