# The ExpoCloud agent-assignment sweep (workflows/agent-assignment/Snakefile) in CWL v1.2:
# every variant on every (n_tasks, n_agents) with n_agents >= n_tasks, on each instance.
#
#   expocloud-cwl sweep.cwl sweep-small.yml    # hardness order, 6 s deadline, skipping
#   cwltool sweep.cwl tiny.yml                 # plain CWL: hints ignored, every solve runs
#
# No JavaScript anywhere (no node needed): the n_agents >= n_tasks filter is points.cwl, and
# generate returns each instance file bundled with its parameters (a record), so that `solve`
# is ONE flat scatter, variant x instance point: all solve jobs are yielded together and the
# runner can order the whole batch easiest first. (A nested per-variant subworkflow would give
# File[][], which CWL cannot flatten without JavaScript, and split the batch.)
cwlVersion: v1.2
class: Workflow
doc: Agent-assignment parameter sweep (heuristic / bnb / brute) with hardness hints.
$namespaces:
  expo: https://expocloud.dev/cwl#
requirements:
  ScatterFeatureRequirement: {}
  StepInputExpressionRequirement: {}  # valueFrom below: parameter references only, not JS

inputs:
  variants: string[]   # some of heuristic, bnb, brute
  n_tasks: int[]
  n_agents: int[]
  instances: int[]     # instance indices (the Snakemake config gives a count: 2 -> [0, 1])

steps:
  points:
    run: points.cwl
    in: {n_tasks: n_tasks, n_agents: n_agents, instances: instances}
    out: [points]

  generate:
    run: generate.cwl
    scatter: point
    in:
      point: points/points  # not a tool input: only read by the valueFroms
      n_tasks: {valueFrom: $(inputs.point.n_tasks)}
      n_agents: {valueFrom: $(inputs.point.n_agents)}
      instance: {valueFrom: $(inputs.point.instance)}
    out: [point]

  solve:
    run: solve.cwl
    scatter: [variant, point]
    scatterMethod: flat_crossproduct
    in:
      variant: variants
      point: generate/point
      n_tasks: {valueFrom: $(inputs.point.n_tasks)}
      n_agents: {valueFrom: $(inputs.point.n_agents)}
      instance: {valueFrom: $(inputs.point.instance)}
      instance_file: {valueFrom: $(inputs.point.instance_file)}
    out: [result]
    # The hardness annotation lives here, not in solve.cwl. Other runners warn and ignore it.
    hints:
      expo:Hardness:
        dimensions: [variant, n_tasks, n_agents]
        orders:
          variant: [heuristic, bnb, brute]
        deadline: 6s  # instead of ToolTimeLimit (see workflows/agent-assignment/SIZING.md)
      expo:Preemptible:
        spotAttempts: 2

  aggregate:
    run: aggregate.cwl
    in:
      results:
        source: solve/result
        # Under expocloud-cwl a skipped or timed-out solve is null (as a false `when:` would
        # give); keep the others (the idiom of conformance test cond-wf-009).
        pickValue: all_non_null
    out: [table]

outputs:
  table:
    type: File
    outputSource: aggregate/table
  results:
    type: File[]
    outputSource: solve/result
    pickValue: all_non_null
