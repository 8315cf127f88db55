"""The Google Compute Engine provider: the engine, its launch settings, the guest side a worker
uses on its VM, the startup script, and the one error classifier and retry helper shared by every
GCE and GCS call.

google-cloud-compute is imported lazily, so the package imports cleanly without the ``gce``
extra. It may import the core, the protocol and the engine contract; never the coordinator's
loop or the front ends.
"""
