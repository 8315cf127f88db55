# The results table, by the Snakemake workflow's own aggregate.py. Its parameters come from
# each result's JSON content (the file names here do not look like variant/t/a/i.json).
cwlVersion: v1.2
class: CommandLineTool
doc: Collect solve results into one TSV table.
baseCommand: [python3, -B]  # -B: no __pycache__ written into the (shared, input) scripts folder
inputs:
  scripts:
    type: Directory
    default: {class: Directory, location: ../agent-assignment/scripts}
  results:  # only the solves that produced a result: skipped and timed-out ones are left out
    type: File[]
    inputBinding: {position: 3}
arguments:
  - {position: 1, valueFrom: $(inputs.scripts.path)/aggregate.py}
  - {position: 2, valueFrom: table.tsv}
outputs:
  table:
    type: File
    outputBinding: {glob: table.tsv}
