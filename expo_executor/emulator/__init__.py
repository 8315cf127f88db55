"""Local stand-ins for Google Cloud: Compute Engine, its metadata server, and GCS.

Used by the tests and by ``expocloud emulator`` (profiles/gce-emulated), so the GCE path can be
tried offline. Nothing here is imported by the executor itself.
"""
