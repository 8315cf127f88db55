"""OS process sessions: a job and everything it started die together, and a VM's power-off is
played by killing every session it marked (``sessions``); and the files only this user may read
(``private_files``: 0600 files in 0700 directories, created so).

A leaf: the worker runs its jobs in sessions, the local engine powers its worker "VMs" off, and
the emulator's fake Compute Engine does what a real VM's power-off does; it imports nothing of
the executor (the standard library only: Linux ``/proc``, signals, subprocesses, file modes).
"""
