"""The primary server for the demo sweep's solve jobs on the original's local engine.

    python -m expocloud_orig_tasks.run_sweep CONFIG_JSON DEADLINE_S SLOTS [--no-pruning]

CONFIG_JSON is the workflow's config.yaml as JSON. One client of SLOTS workers, backup server
off, as for benchmark 1 (run_server.py).
"""

import json
import sys

from expocloud_orig_tasks.agent_assignment import sweep_tasks
from src.engines.local import LocalEngine
from src.server import Server

if __name__ == "__main__":
    config, deadline_s, slots = json.loads(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
    tasks = sweep_tasks(config, deadline_s, pruning="--no-pruning" not in sys.argv[4:])
    Server(tasks, LocalEngine("expocloud_orig_tasks"), backup=False, max_clients=1,
           max_cpus_per_client=slots).run()
