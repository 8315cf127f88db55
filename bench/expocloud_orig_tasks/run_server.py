"""The primary server for benchmark 1's trivial tasks on the original's local engine.

    python -m expocloud_orig_tasks.run_server TASKS SLOTS [--backup]

One client of SLOTS workers (max_clients=1, max_cpus_per_client=SLOTS), so that the original runs
as many tasks at a time as expocloud's default local fleet (2 workers x 1 slot); its backup
server is off unless --backup. In local mode the server returns once every result is in.
"""

import os
import sys

from expocloud_orig_tasks.task import Task
from src.engines.local import LocalEngine
from src.server import Server

if __name__ == "__main__":
    tasks, slots = int(sys.argv[1]), int(sys.argv[2])
    os.makedirs("out", exist_ok=True)
    Server([Task(i) for i in range(tasks)], LocalEngine("expocloud_orig_tasks"),
           backup="--backup" in sys.argv[3:], max_clients=1,
           max_cpus_per_client=slots).run()
