"""The bucket channel between the coordinator and its workers: the bucket contract and its two
backends (a local directory, a GCS prefix), deleting a run's prefix, the signed JSON messages,
and every key of the layout.

The coordinator writes inboxes; each worker writes its own status and results; nothing else
crosses. It may import the core's records, errors and hardness (a job's prune point is a
hardness point), and the ``gcp`` leaf (Google's error classifier and retry helper, which load no
SDK) that the GCS backend (``gcs_bucket``, loaded only for a ``gs://`` URL) retries with;
google-cloud-storage only lazily. Never the coordinator, worker, engines or front ends.
"""
