# One solve, by the Snakemake workflow's own solve.py. No ToolTimeLimit and no hardness here:
# the sweep adds both as hints on its step, so this tool stays reusable as it is.
cwlVersion: v1.2
class: CommandLineTool
doc: Solve one instance with one variant (heuristic, bnb or brute).
baseCommand: [python3, -B]  # -B: no __pycache__ written into the (shared, input) scripts folder
inputs:
  scripts:  # the whole folder: solve.py imports atomic.py from its own directory
    type: Directory
    default: {class: Directory, location: ../agent-assignment/scripts}
  variant: {type: string, inputBinding: {position: 2}}
  instance_file: {type: File, inputBinding: {position: 3}}
  # Not on the command line (solve.py reads them from the instance): inputs so that hardness
  # hints can name them and the result file is named after its point.
  n_tasks: int
  n_agents: int
  instance: int
arguments:
  - {position: 1, valueFrom: $(inputs.scripts.path)/solve.py}
  - {position: 4, valueFrom: $(inputs.variant)_$(inputs.n_tasks)_$(inputs.n_agents)_$(inputs.instance).json}
outputs:
  # The JSON itself carries variant, n_tasks, n_agents and instance (aggregate.py reads them).
  result:
    type: File
    outputBinding: {glob: $(inputs.variant)_$(inputs.n_tasks)_$(inputs.n_agents)_$(inputs.instance).json}
