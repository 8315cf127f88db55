"""The coordinator: one run's loop, its protocol I/O, pool health, budget meter, launch and run
records.

It drives the pure core with what the bucket and the engine say, and is what the front ends talk
to. It may import the core, the protocol (the bucket, its messages and keys), the engines,
cost, and the leaves ``runs`` (a run directory's files, read and written), ``settings``,
``notify`` (notifications sent off the loop's thread) and ``gcp`` (which errors of Google's are an
outage to ride out); never a front end (front ends import it).

- ``loop``: the ``Coordinator``: its thread, the order of a round, the front ends' hand-over
  points; ``requests`` (``JobRequest``, ``JobReport``) and ``config`` (``CoordinatorConfig``)
  are what crosses to it; the round's steps, mixed into it: ``observe`` (statuses and results
  in), ``vm_life`` (the engine's news, boots, creates and deletes), ``decisions`` (the meter,
  assignments, scaling and stranding, as ``core.one_round`` decides them) and ``adopted_runs``
  (a crashed run's workers taken over);
- ``desk``: the locked hand-over of jobs and reports between threads;
- ``outage``: failed rounds: an outage of the coordinator's own I/O ridden out, a bug given up on;
- ``channel``: the bucket: worker statuses and results in, inboxes out;
- ``vms``: the VMs tracked, and their records in ``vms.jsonl``; ``places``: where each job
  stands on each worker, one record each, from which its inbox is written;
- ``pools``: pool health (failed creates, boots, capacity), over ``core.pool_health``;
- ``meter``: the run's cost and budget phase, over ``core.budget``;
- ``reports`` and ``outcomes``: scheduler events acted on; report texts and ``jobs.jsonl`` lines;
  ``persist``: those local records written again while a write fails, never lost;
- ``progress``: ``status.json`` and the progress line;
- ``notices``: the run's events (its end, a budget phase, the first failure, a stall, a pool
  stopped) through the core's rules (``core.notices``) to the ``notify`` sender;
- ``saved_logs``: a failed or timed-out job's logs, copied from the bucket into the run
  directory before it is reported;
- ``state``: what outlives a run (its run directories' files are the ``runs`` leaf's);
- ``settings``: every engine's settings in one ``ExecutorSettings``, and ``validate``, which
  runs every check (the fields, defaults and checks themselves are the ``settings`` leaf's and
  the engines'); ``profile_settings``: them read from a profile; ``launch``: a started
  coordinator for them;
- ``shapes``: per-rule machines (GCE) and their sizes and prices; ``rule_machines``: how one is
  chosen (a rule's ``auto``, a job beyond the run's workers);
- ``runtime_models``: the run's runtime models, one per family, and the one place that picks
  how the estimate of what is left is made; ``estimates``: the learned model's drawn estimate,
  recomputed in a thread of its own.
"""
