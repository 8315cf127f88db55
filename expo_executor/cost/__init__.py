"""What VMs cost: the price snapshot, machine shapes, the SciSpot preemption model, machine
choice, the cost report (with its split by rule) and the storage-operation budget; across
regions, the egress of staged files from the bucket (``egress``) and what a region weighs for
placement (``region_weight``).

Mostly pure arithmetic over prices and run records. It may import the core and two leaves:
``runs`` (the run records' reader) and ``gcp`` (``prices --refresh`` talks to the Cloud Billing
Catalog through Google's error classifier and retry helper; the SDK only lazily). Never the
coordinator, the engines or front ends.
"""
