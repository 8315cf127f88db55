"""``expocloud simulate``: the real scheduler and the coordinator's decisions under simulated time.

- ``workload``: what runs (jobs, synthetic sweeps, a past run's records) and boot delays;
- ``policies``: ``SimConfig`` and the policies compared;
- ``cloud``: the simulated cloud (VMs, jobs, preemptions, stockouts, the bill) on an event heap;
- ``regions``: a simulated run across regions (each its prices and stockouts);
- ``views``: the fleet's view of the coordinator's VMs, kept up to date incrementally;
- ``simulation``: the coordinator's round under simulated time (``simulate``, ``compare``);
- ``table``: the comparison as a markdown table, ratios and a plot;
- ``command``: the ``expocloud simulate`` command line.

- ``replay``: ``--workload FILE.csv``, recorded runtimes replayed under the real scheduler on
  a fixed pool of slots, with the domino effect and the learned model (issue 32);

It may import the core, cost, the learned runtime model (``learned``), the leaves ``runs`` (the run
records' reader, to load past runs) and ``settings`` (the command line's defaults are a GCE run's:
machine type, poll, idle timeout, on-demand pool size), and the report's run finder and job
selection; never the coordinator, engines or front ends: it takes decisions through the same pure
functions (``core.scaling``, ``core.pool_health``, ``core.budget``).
"""
