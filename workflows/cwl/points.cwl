# The (n_tasks, n_agents, instance) points of the sweep: the cross product of the inputs,
# keeping n_agents >= n_tasks as the Snakefile does. A tiny script rather than a `when:`
# so that the workflow needs no JavaScript (no node on the workers or in CI).
cwlVersion: v1.2
class: CommandLineTool
doc: Cross n_tasks x n_agents x instances, keeping only n_agents >= n_tasks.
baseCommand: [python3, -B]  # -B: no __pycache__ written into the (shared, input) scripts folder
inputs:
  script:
    type: File
    default: {class: File, location: scripts/points.py}
    inputBinding: {position: 0}
  n_tasks:
    type: int[]
    inputBinding: {position: 1, prefix: --n-tasks}
  n_agents:
    type: int[]
    inputBinding: {position: 2, prefix: --n-agents}
  instances:
    type: int[]
    inputBinding: {position: 3, prefix: --instances}
outputs:  # read from cwl.output.json
  points:
    type:
      type: array
      items:
        type: record
        name: Point
        fields:
          n_tasks: int
          n_agents: int
          instance: int
