"""The bucket channel between the coordinator and its workers: the bucket contract and its two
backends (a local directory, a GCS prefix), the signed JSON messages, and every key of the layout.

The coordinator writes inboxes; each worker writes its own status and results; nothing else
crosses. It may import the core's records, errors and hardness (a job's prune point is a
hardness point); the GCS backend (``gcs_bucket``, loaded only for a ``gs://`` URL) also
imports the GCE provider's error classifier and retry helper (``engines.gce.errors``,
``engines.gce.retry``, which load no SDK) and, lazily, google-cloud-storage. Never the coordinator, worker, engines' VM code or front ends.
"""
