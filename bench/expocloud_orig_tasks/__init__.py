"""Our tasks for the original ExpoCloud (github.com/mgoldenbe/ExpoCloud), written against its API.

The original's local engine starts a client as ``python -m <project_folder>.run_client``; this
package is that project folder (bench/ and a patched copy of the original's ``src`` are on the
PYTHONPATH of its processes; see bench/expocloud_orig.py). Nothing here is the original's code.
"""
