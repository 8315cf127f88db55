"""What VMs cost: the price snapshot, machine shapes, the SciSpot preemption model, machine
choice, the cost report and the storage-operation budget.

Mostly pure arithmetic over prices and run records (``prices --refresh`` talks to the Cloud
Billing Catalog, lazily). It may import the core and the run records' reader (``coordinator.run_files``); never the
coordinator's loop, engines or front ends.
"""
