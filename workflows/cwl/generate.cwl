# One random instance, by the Snakemake workflow's own generate.py (not a copy of it).
cwlVersion: v1.2
class: CommandLineTool
doc: Seeded agent-assignment instance for (n_tasks, n_agents, instance).
baseCommand: [python3, -B]  # -B: no __pycache__ written into the (shared, input) scripts folder
inputs:
  scripts:  # the whole folder: the scripts import atomic.py from their own directory
    type: Directory
    default: {class: Directory, location: ../agent-assignment/scripts}
  n_tasks: {type: int, inputBinding: {position: 2}}
  n_agents: {type: int, inputBinding: {position: 3}}
  instance: {type: int, inputBinding: {position: 4}}
arguments:
  - {position: 1, valueFrom: $(inputs.scripts.path)/generate.py}
  - {position: 5, valueFrom: $(inputs.n_tasks)_$(inputs.n_agents)_$(inputs.instance).json}
outputs:
  instance_file:
    type: File
    outputBinding: {glob: $(inputs.n_tasks)_$(inputs.n_agents)_$(inputs.instance).json}
  # The same file bundled with its parameters: the sweep crosses these records with the
  # variants in one flat scatter (CWL cannot zip arrays into records without JavaScript).
  point:
    type:
      type: record
      name: InstancePoint
      fields:
        n_tasks: {type: int, outputBinding: {outputEval: $(inputs.n_tasks)}}
        n_agents: {type: int, outputBinding: {outputEval: $(inputs.n_agents)}}
        instance: {type: int, outputBinding: {outputEval: $(inputs.instance)}}
        instance_file:
          type: File
          outputBinding: {glob: $(inputs.n_tasks)_$(inputs.n_agents)_$(inputs.instance).json}
