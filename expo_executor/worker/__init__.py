"""The worker agent (``expocloud-worker``) and what it runs: jobs in their own process groups,
staged commands (``staged_job``; a direct Snakemake job's storage files: ``direct_staged``;
what both check: ``staged_checks``), and the logs a failed job leaves (``saved_logs``).
The agent is its command line (``agent``) and its loop (``agent_loop``), whose parts are a
module each: ``coordinator_contact`` (the inbox; the pulse through ``pulse_reader``),
``job_starts``, ``running_jobs``, ``result_reports`` and ``failure_reason``. Jobs are forked
by the job runner: the ``zygote`` (its agent side ``forked``, its forking ``sibling_fork``) and
each workflow's template (``workflow_template``, ``loaded_workflow``, ``job_arguments``). A
Snakemake job's own process runs under ``command_clock``, which also has it read storage
files' local copies first (``local_copies``), fetch a finished checkpoint's outputs when an
input function asks for them (``checkpoint_copies``, which the Snakemake plugin installs in the
main process too) and count the bytes it moves to and from the bucket (``staged_bytes``).

Runs on each VM (or as a local process standing in for one) and talks to the coordinator only
through the bucket. It may import the core's records, its hardness (the coordinator's rule of
dominance, for the held jobs its own timeouts dominate) and ``held_jobs`` (prefetch's rules,
which the worker follows as the coordinator decides them), the protocol, the ``processes`` leaf
(its jobs' sessions) and, lazily, the GCE guest side; never the coordinator, the engines' VM
code or the front ends.
"""
