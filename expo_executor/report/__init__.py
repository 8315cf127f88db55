"""A run's results for people: the results table, the outcome map, and safe expressions for
``report --filter`` / ``--best`` (``safe_expr``, compiled by ``safe_expr_compile``).

Reads run records only, through the ``runs`` leaf's reader, and the runtime models saved in
the state dir; it may import the core, cost and ``runs``, and ``learned`` lazily (inside a
function: a saved model is refitted to say where its data disagrees with the declared order);
never the coordinator, engines or front ends.
"""
