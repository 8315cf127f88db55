"""The bucket channel between the coordinator and its workers: the bucket contract and its two
backends (a local directory, a GCS prefix), the signed JSON messages, and every key of the layout.

The coordinator writes inboxes; each worker writes its own status and results; nothing else
crosses. It may import the core (records, errors) and, lazily, google-cloud-storage and the GCE
provider's error classifier and retry helper; never the coordinator, worker, engines' VM code or
front ends.
"""
