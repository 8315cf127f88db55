"""Local stand-ins for Google Cloud: Compute Engine, its metadata server, and GCS.

Used by the tests and by ``expocloud emulator`` (profiles/gce-emulated), so the GCE path can be
tried offline. Nothing here is imported by the executor itself (only the command line imports
it), and it imports nothing of the executor but the ``processes`` leaf (a fake VM powers off
as a real one does) and the bucket's layout (a fake VM whose startup fails leaves its log
where the real startup script does).
"""
