"""The client script the original's local engine runs: ``python -m expocloud_orig_tasks.run_client
<server ip> <port> <name> <max cpus>`` (the arguments are read by its ``src.util``)."""

from expocloud_orig_tasks.task import Task
from src.client import Client

UNPICKLES = (Task,)  # granted tasks arrive pickled: this process must have imported their class

if __name__ == "__main__":
    Client().run()
