"""The Google Compute Engine provider: the engine (``placement``: which zone first, across
regions), its settings (``settings``: its fields and what
a run derives from them; ``settings_checks``: their checks and the credentials') and ``launch``,
which turns them into an engine for one run, the guest side a worker
uses on its VM, the startup script, the Compute clients and the one instance delete, the checks
of a project before a run (``doctor``, which runs ``doctor_access``'s and ``doctor_fleet``'s
checks over ``doctor_context``'s records, with ``google_apis``, ``quota_plan`` and
``bucket_access``). Every Google call it makes is classified and retried by the ``gcp`` leaf.

google-cloud-compute is imported lazily, so the package imports cleanly without the ``gce``
extra. It may import the core, the protocol, the leaves (``gcp``, ``settings``) and the engine
contract; never the coordinator or the front ends.
"""
