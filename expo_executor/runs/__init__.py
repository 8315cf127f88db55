"""A run's records, the files of ``.expocloud/runs/<run>/`` (``files``: ``RunFiles``, the one
writer and reader of them), and the whole-file atomic write (``atomic``) that they and the
state directory use.

A leaf: the coordinator and the front ends write a run's records; ``expocloud report``,
``status`` and ``logs``, the cost report, the preemption fit, the simulator and the tests read
them, all through ``files``. It imports nothing of the executor (the standard library only).
"""
