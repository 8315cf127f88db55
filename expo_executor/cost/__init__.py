"""What VMs cost: the price snapshot, machine shapes, the SciSpot preemption model, machine
choice, the cost report and the storage-operation budget.

Mostly pure arithmetic over prices and run records. It may import the core and the run
records' reader (``coordinator.run_files``); ``prices --refresh`` talks to the Cloud Billing
Catalog, lazily, through the GCE provider's error classifier and retry helper. Never the
coordinator's loop, the engines' VM code or front ends.
"""
