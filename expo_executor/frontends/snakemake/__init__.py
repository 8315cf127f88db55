"""``snakemake --executor expocloud``: the executor, and the description of a Snakemake job
(key, hardness point, deadline, CPUs). May import what ``frontends`` may; imports Snakemake."""
