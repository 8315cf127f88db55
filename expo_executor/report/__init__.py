"""A run's results for people: the results table, the outcome map, and safe expressions for
``report --filter`` / ``--best`` (``safe_expr``, compiled by ``safe_expr_compile``).

Reads run records only, through the ``runs`` leaf's reader; it may import the core, cost and
``runs``; never the coordinator, engines or front ends.
"""
