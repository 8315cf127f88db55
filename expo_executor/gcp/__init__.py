"""Google Cloud calls, whoever makes them: how a call failed (``errors``: Compute Engine and the
Cloud Billing Catalog, Cloud Storage, the metadata server) and retry with backoff (``retry``,
with the one set of default attempts and delays), Google's rules for resource labels
(``labels``: the GCE engine, the per-rule machines and the settings checks read them), and
Google's regions and zones (``zones``: a catalogue, and the continent each region's data
transfer is priced by).

A leaf, like SkyPilot's ``sky/adaptors/gcp.py``: the GCS bucket (``protocol``), the price
refresh (``cost``), the GCE provider (``engines.gce``) and the coordinator's outage rule all
import it, and it imports nothing of the executor. The Google SDKs are imported inside its
functions, so it imports cleanly without the ``gce`` or ``gcs`` extras.
"""
