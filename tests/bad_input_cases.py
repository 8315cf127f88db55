"""The bad-input table: malformed settings, profiles, hardness specs, CWL hints, credentials and
bucket names, each with the setting its one-line error must name and the problem it must say.

tests/e2e/test_bad_input_runs.py runs every case; tests/unit/test_bad_input.py checks the table.
``COMPUTE`` and ``TMP`` in a case's arguments, files and environment stand for the case's fake
Compute endpoint and its directory.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from tests.helpers import HINTED_TOOL

# A tool without hints; it too makes a marker file if it runs.
PLAIN_TOOL = """cwlVersion: v1.2
class: CommandLineTool
inputs:
  size: {type: int, inputBinding: {position: 1}}
baseCommand: [touch, ran]
outputs: []
"""

COMPUTE = "@COMPUTE@"  # replaced by the case's fake Compute endpoint
TMP = "@TMP@"  # replaced by the case's directory
WORKER = ["--expocloud-gce-service-account", "expocloud-worker@p.iam.gserviceaccount.com"]
GCE = ["--expocloud-engine", "gce", "--expocloud-gce-project", "p", "--expocloud-gce-zones",
       "us-central1-a", "--expocloud-max-workers", "2", "--expocloud-gce-endpoint", COMPUTE,
       *WORKER]
# the real GCE path: no endpoint at all, files through GCS as profiles/gce-spot has it
REAL_GCE = ["--expocloud-engine", "gce", "--expocloud-gce-project", "p",
            "--expocloud-gce-zones", "us-central1-a", "--expocloud-max-workers", "2",
            "--shared-fs-usage", "none", "--default-storage-provider", "gcs",
            "--default-storage-prefix", "gs://expocloud-bkt/wf", "--storage-gcs-project", "p",
            *WORKER]
# the CWL runner on the fake Compute
CWL_GCE = ["--expocloud-engine", "gce", "--expocloud-gce-project", "p", "--expocloud-gce-zones",
           "us-central1-a", "--expocloud-max-workers", "2", "--expocloud-gce-endpoint", COMPUTE,
           *WORKER]
CRED = "GOOGLE_APPLICATION_CREDENTIALS"
ARGPARSE = "usage:"  # Snakemake's own parser: the fix is the usage it prints above the line


# what Snakemake asks of conda before planning (no conda channel is reachable here)
STAND_IN_CONDA = """#!/bin/sh
case "$*" in
  --version) echo 'conda 24.9.0' ;;
  "info --json") echo '{"conda_prefix": "/nowhere", "platform": "linux-64"}' ;;
  "config --get channel_priority --json") echo '{"get": {"channel_priority": "strict"}}' ;;
esac
"""


def SNAKEFILE_WITH(directive: str) -> str:  # noqa: N802 - reads as the constant it makes
    """The bad-input workflow (rule 'work') with one more directive in its rule."""
    return ("rule all:\n    input: expand('out/{a}/{n}.txt', a=['x', 'y'], n=[1, 2])\n\n"
            f"rule work:\n    output: 'out/{{a}}/{{n}}.txt'\n    {directive}\n"
            "    shell: 'echo > {output}'\n")


@dataclass
class Case:
    name: str
    category: str  # settings | profile | hardness | cwl-hint | credentials | bucket
    args: list[str]
    setting: str  # the line must name this
    problem: str  # ... and say this
    front: str = "snakemake"  # or "cwl"
    files: dict[str, str] = field(default_factory=dict)  # written into the case's directory
    env: dict[str, str] = field(default_factory=dict)  # TMP replaced; "" removes the variable
    fix: str = "fix:"  # what in the line (or, for ARGPARSE, the output) carries the fix


OFFLINE = {"STORAGE_EMULATOR_HOST": "", "HTTPS_PROXY": "http://127.0.0.1:9",
           "HTTP_PROXY": "http://127.0.0.1:9", "GCE_METADATA_HOST": "127.0.0.1:9",
           "GCE_METADATA_IP": "127.0.0.1:9", "NO_GCE_CHECK": "True",
           "CLOUDSDK_CONFIG": f"{TMP}/gcloud"}

CASES = [
    # -- hardness specs and per-rule resources ----------------------------------------------
    Case("malformed spec", "hardness", ["--set-resources", 'work:hardness="a:x<x, n"'],
         "resource 'hardness' of rule 'work'", "repeated value"),
    Case("spec syntax", "hardness", ["--set-resources", 'work:hardness="a n"'],
         "resource 'hardness' of rule 'work'", "not a wildcard name"),
    Case("unknown wildcard", "hardness", ["--set-resources", 'work:hardness="n, m"'],
         "resource 'hardness' of rule 'work'", "unknown wildcard 'm'"),
    Case("non-numeric without order", "hardness", ["--set-resources", 'work:hardness="a, n"'],
         "resource 'hardness' of rule 'work'", "no declared order"),
    Case("value missing from order", "hardness", ["--set-resources", 'work:hardness="a:x<z, n"'],
         "resource 'hardness' of rule 'work'", "value 'y' of 'a' is missing from its declared"),
    Case("negative deadline", "hardness", ["--set-resources", "work:deadline=-5s"],
         "resource 'deadline' of rule 'work'", "-5s"),
    Case("unparsable deadline", "hardness", ["--set-resources", "work:deadline=soon"],
         "resource 'deadline' of rule 'work'", "cannot read the duration 'soon'"),
    Case("zero runtime", "hardness", ["--set-resources", "work:runtime=0"],
         "resource 'runtime' of rule 'work'", "not positive"),
    # (locally such a job runs with the cores there are, as under plain Snakemake)
    # (on GCE a job beyond the run's workers gets a machine that holds it, whether or not the
    # user set the slots per worker, which describe the run's own workers)
    Case("threads beyond any machine", "hardness", [*GCE, "--set-threads", "work=500"],
         "threads of rule 'work'", "more than any machine type has"),
    Case("memory beyond any machine", "hardness",
         [*GCE, "--set-resources", "work:mem_mb=99999999"],
         "resource 'mem_mb' of rule 'work'", "more than any machine type of 1+ vCPUs has"),
    # -- per-rule machines on GCE ----------------------------------------------------------
    Case("unknown GPU type", "hardness",
         [*GCE, "--set-resources", "work:gpu_type=nvidia-tesla-k9000"],
         "resource 'gpu_type' of rule 'work'", "unknown GPU type 'nvidia-tesla-k9000'"),
    Case("GPUs on a machine type that takes none", "hardness",
         [*GCE, "--set-resources", "work:machine_type=e2-standard-4",
          "work:gpu_type=nvidia-tesla-t4"],
         "resource 'gpu_type' of rule 'work'", "e2-standard-4 takes no GPUs"),
    Case("a GPU count the machine type cannot take", "hardness",
         [*GCE, "--set-resources", "work:machine_type=n1-standard-4",
          "work:gpu_type=nvidia-tesla-t4", "work:gpu=3"],
         "resource 'gpu_type' of rule 'work'", "attaches in counts of 1, 2, 4, not 3"),
    Case("a GPU rule without a GPU image", "hardness",
         [*GCE, "--set-resources", "work:gpu_type=nvidia-tesla-t4"],
         "resource 'gpu_type' of rule 'work'", "no GPU image is set",
         fix="--expocloud-gce-gpu-image"),
    Case("GPUs of no type", "hardness", [*GCE, "--set-resources", "work:gpu=1"],
         "resource 'gpu' of rule 'work'", "1 GPUs of no type"),
    Case("threads beyond the rule's own machine", "hardness",
         [*GCE, "--set-resources", "work:machine_type=n2-standard-4", "--set-threads", "work=8"],
         "threads of rule 'work'", "its machine, n2-standard-4"),
    Case("a machine type GCE does not have", "hardness",
         [*GCE, "--set-resources", "work:machine_type=n2-huge-3"],
         "resource 'machine_type' of rule 'work'", "cannot read the machine type 'n2-huge-3'"),
    # -- software a GCE worker cannot provide (yet) ------------------------------------------
    # (Snakemake itself first checks that this machine has the tool: a stand-in answers)
    Case("containers on GCE workers", "hardness",
         [*GCE, "--software-deployment-method", "apptainer"],
         "--software-deployment-method apptainer", "rule 'work' has a container: directive",
         files={"Snakefile": SNAKEFILE_WITH("container: 'docker://debian:12'"),
                "bin/apptainer": "#!/bin/sh\necho 'apptainer version 1.3.4'\n"},
         env={"PATH": f"{TMP}/bin:{os.environ.get('PATH', '')}"}),
    Case("conda on GCE workers whose image is not said to have it", "hardness",
         [*GCE, "--software-deployment-method", "conda"],
         "--software-deployment-method conda", "--expocloud-gce-worker-provides conda",
         files={"Snakefile": SNAKEFILE_WITH("conda: 'env.yaml'"),
                "env.yaml": "dependencies: [python]\n",
                "bin/conda": STAND_IN_CONDA},
         env={"PATH": f"{TMP}/bin:{os.environ.get('PATH', '')}"}),
    # -- settings ---------------------------------------------------------------------------
    Case("gce unknown worker-provided software", "settings",
         [*GCE, "--expocloud-gce-worker-provides", "conda,spack"],
         "--expocloud-gce-worker-provides", "unknown value 'spack'"),
    Case("notify over plain http", "settings",
         [*GCE, "--expocloud-notify", "http://hooks.example.com/services/T0/B0/XYZ"],
         "--expocloud-notify", "http://hooks.example.com is not an https:// URL",
         env={"EXPOCLOUD_NOTIFY_SECRET": "s"}),
    Case("negative prefetch", "settings", ["--expocloud-prefetch", "-1"],
         "--expocloud-prefetch", "is not valid"),
    Case("gce bad boot timeout", "settings", [*GCE, "--expocloud-boot-timeout", "soon"],
         "--expocloud-boot-timeout", "cannot read the duration 'soon'"),
    Case("gce bad capacity timeout", "settings", [*GCE, "--expocloud-capacity-timeout", "forever"],
         "--expocloud-capacity-timeout", "cannot read the duration 'forever'"),
    Case("boot timeout within the boot delay", "settings",
         ["--expocloud-boot-delay", "30", "--expocloud-boot-timeout", "10s"],
         "--expocloud-boot-timeout", "is not longer than --expocloud-boot-delay"),
    Case("a skip probability of 1 or more", "settings", ["--expocloud-skip-above", "1.5"],
         "--expocloud-skip-above", "1.5 is not a probability between 0 and 1"),
    Case("a model skip without a model", "settings",
         ["--expocloud-skip-above", "0.99", "--expocloud-hardness-model", "none"],
         "--expocloud-skip-above", "--expocloud-hardness-model is 'none'"),
    Case("a negative trust threshold", "settings", ["--expocloud-model-trust-after", "-1"],
         "--expocloud-model-trust-after", "-1 is not a count of finished jobs"),
    Case("an unknown runtime model", "settings", ["--expocloud-hardness-model", "magic"],
         "--expocloud-hardness-model", "unknown model 'magic'"),
    Case("a runtime model that cannot be loaded", "settings",
         ["--expocloud-hardness-model", "nowhere_at_all:factory"],
         "--expocloud-hardness-model", "cannot load 'nowhere_at_all:factory'"),
    Case("unknown on-skip value", "settings", ["--expocloud-on-skip", "maybe"],
         "--expocloud-on-skip", "invalid choice: 'maybe'", fix="choose from"),
    Case("unknown engine", "settings", ["--expocloud-engine", "moon"], "--expocloud-engine",
         "invalid choice", fix="choose from"),
    Case("zero slots", "settings", ["--expocloud-slots-per-worker", "0"],
         "--expocloud-slots-per-worker", "is not valid"),
    Case("oversubscription", "settings", ["--expocloud-max-workers", "64"],
         "--expocloud-max-workers", "exceed this machine's"),
    Case("bad run id", "settings", ["--expocloud-run-id", "../escape"], "--expocloud-run-id",
         "not a valid run"),
    Case("bad placeholder template", "settings", ["--expocloud-placeholder-text", "cost $"],
         "--expocloud-placeholder-text", "not a valid $-template"),
    Case("gce without project", "settings", [*GCE, "--expocloud-gce-project", ""],
         "--expocloud-gce-project", "needs a project"),
    Case("gce bad zone", "settings", [*GCE, "--expocloud-gce-zones", "us-central1"],
         "--expocloud-gce-zones", "'us-central1' is not a zone name"),
    # (zones of several regions are allowed: docs/gce.md, "Several regions")
    Case("gce zone that does not exist", "settings",
         [*GCE, "--expocloud-gce-zones", "us-central1-a,us-central1-z"],
         "--expocloud-gce-zones", "zone us-central1-z does not exist"),
    Case("gce region with no zone", "settings",
         [*GCE, "--expocloud-gce-regions", "mars-north1"],
         "--expocloud-gce-regions", "region 'mars-north1' has no zone"),
    Case("gce subnetwork of another region", "settings",
         [*GCE, "--expocloud-gce-subnetwork", "projects/p/regions/europe-west1/subnetworks/s"],
         "--expocloud-gce-subnetwork", "is in region europe-west1, but zone us-central1-a"),
    Case("gce malformed network", "settings", [*GCE, "--expocloud-gce-network", "networks/vpc"],
         "--expocloud-gce-network", "neither a network name nor a network URL"),
    Case("gce reserved label", "settings", [*GCE, "--expocloud-gce-labels", "expocloud-run=x"],
         "--expocloud-gce-labels", "not a valid label"),
    Case("gce bad max run duration", "settings",
         [*GCE, "--expocloud-gce-max-run-duration", "forever"],
         "--expocloud-gce-max-run-duration", "cannot read the duration"),
    Case("gce grace below slow poll", "settings", [*GCE, "--expocloud-heartbeat-grace", "30"],
         "--expocloud-heartbeat-grace", "too short for a slow poll interval"),
    Case("gce with a shared file system", "settings", GCE, "shared-fs-usage",
         "share no file system"),
    Case("gce small disk", "settings", [*GCE, "--expocloud-gce-disk-gb", "5"],
         "--expocloud-gce-disk-gb", "too small"),
    Case("gce without a worker service account", "settings",
         [*GCE, "--expocloud-gce-service-account", ""], "--expocloud-gce-service-account",
         "needs the workers' service account named", fix="'default' for the Compute Engine"),
    Case("cwl gce without a worker service account", "settings",
         [*CWL_GCE, "--expocloud-gce-service-account", "", "--default-storage-prefix",
          "gs://expocloud-bkt/wf", "tool.cwl", "--size", "1"], "--expocloud-gce-service-account",
         "needs the workers' service account named", front="cwl",
         files={"tool.cwl": PLAIN_TOOL}, fix="expocloud-worker@p.iam.gserviceaccount.com"),
    Case("gce worker service account that is no email", "settings",
         [*GCE, "--expocloud-gce-service-account", "expocloud-worker"],
         "--expocloud-gce-service-account", "'expocloud-worker' is not a service account's"),
    Case("budget on the local engine", "settings", ["--expocloud-budget", "5"],
         "--expocloud-budget", "local workers cost nothing"),
    Case("negative budget", "settings", [*GCE, "--expocloud-budget", "-1"],
         "--expocloud-budget", "not valid"),
    Case("unknown budget action", "settings", ["--expocloud-budget-action", "panic"],
         "--expocloud-budget-action", "invalid choice", fix="choose from"),
    Case("worker requirements: missing file", "settings",
         [*GCE, "--expocloud-worker-requirements", f"{TMP}/nowhere.txt"],
         "--expocloud-worker-requirements", "nowhere.txt does not exist"),
    Case("worker requirements: unpinned line", "settings",
         [*GCE, "--expocloud-worker-requirements", "reqs.txt"],
         "--expocloud-worker-requirements", "line 2 of reqs.txt: 'numpy>=1.26' is not an exact",
         files={"reqs.txt": "# mine\nnumpy>=1.26\n"}),
    Case("worker requirements: a pin the workers run at another version", "settings",
         [*GCE, "--expocloud-worker-requirements", "reqs.txt"],
         "--expocloud-worker-requirements", "snakemake==0.0.1 (the workers run snakemake==",
         files={"reqs.txt": "snakemake==0.0.1\n"}),
    Case("cwl worker requirements: a directory", "settings",
         ["--expocloud-profile", f"{TMP}/prof", "tool.cwl", "--size", "1"],
         "--expocloud-worker-requirements", "(Is a directory)", front="cwl",
         files={"prof/config.yaml": "expocloud-worker-requirements: prof\n",
                "tool.cwl": PLAIN_TOOL}),
    Case("cwl gce with shared staging", "settings",
         [*CWL_GCE, "--default-storage-prefix", "gs://expocloud-bkt/wf",
          "--expocloud-staging", "shared"], "--expocloud-staging", "share no file system",
         front="cwl"),
    # -- profiles ---------------------------------------------------------------------------
    Case("profile: unknown expocloud key", "profile", ["--workflow-profile", f"{TMP}/prof"],
         "--expocloud-colour", "unrecognized arguments", files={
             "prof/config.yaml": "executor: expocloud\nexpocloud-colour: red\n"},
         fix=ARGPARSE),
    Case("profile: value of the wrong type", "profile", ["--workflow-profile", f"{TMP}/prof"],
         "--expocloud-max-workers", "invalid int value: 'many'", files={
             "prof/config.yaml": "executor: expocloud\nexpocloud-max-workers: many\n"},
         fix=ARGPARSE),
    Case("profile: bad value of a known key", "profile", ["--workflow-profile", f"{TMP}/prof"],
         "--expocloud-idle-timeout", "is not valid", files={
             "prof/config.yaml": "executor: expocloud\nexpocloud-idle-timeout: -3\n"}),
    Case("cwl profile: unknown expocloud key", "profile",
         ["--expocloud-profile", f"{TMP}/prof", "tool.cwl", "--size", "1"],
         "expocloud-colour in", "not a setting expocloud-cwl knows", front="cwl",
         files={"prof/config.yaml": "expocloud-colour: red\n", "tool.cwl": PLAIN_TOOL}),
    Case("cwl profile: value of the wrong type", "profile",
         ["--expocloud-profile", f"{TMP}/prof", "tool.cwl", "--size", "1"],
         "expocloud-max-workers in", "'many' is not", front="cwl",
         files={"prof/config.yaml": "expocloud-max-workers: many\n", "tool.cwl": PLAIN_TOOL}),
    Case("cwl profile: a list for a number", "profile",
         ["--expocloud-profile", f"{TMP}/prof", "tool.cwl", "--size", "1"],
         "expocloud-slots-per-worker in", "is not", front="cwl",
         files={"prof/config.yaml": "expocloud-slots-per-worker: [1, 2]\n",
                "tool.cwl": PLAIN_TOOL}),
    Case("cwl profile: unknown choice", "profile",
         ["--expocloud-profile", f"{TMP}/prof", "tool.cwl", "--size", "1"],
         "expocloud-engine in", "'moon' is not", front="cwl",
         files={"prof/config.yaml": "expocloud-engine: moon\n", "tool.cwl": PLAIN_TOOL}),
    # -- CWL hints (schema-salad's own multi-line errors: tests/test_cwl.py) -------------------------------------------
    Case("cwl hint: unknown input", "cwl-hint", ["tool.cwl", "--variant", "a", "--size", "3"],
         "expo:Hardness", "unknown input 'width'", front="cwl",
         files={"tool.cwl": HINTED_TOOL.replace("HINT", "    dimensions: [width]")}),
    Case("cwl hint: non-numeric without order", "cwl-hint",
         ["tool.cwl", "--variant", "a", "--size", "3"], "expo:Hardness",
         "input 'variant' is not numeric (string) and has no declared order", front="cwl",
         files={"tool.cwl": HINTED_TOOL.replace("HINT", "    dimensions: [variant, size]")}),
    Case("cwl hint: order of a non-dimension", "cwl-hint",
         ["tool.cwl", "--variant", "a", "--size", "3"], "expo:Hardness",
         "'variant', which is not a dimension", front="cwl", files={"tool.cwl": HINTED_TOOL.replace(
             "HINT", "    dimensions: [size]\n    orders: {variant: [a, b]}")}),
    Case("cwl hint: value missing from its order", "cwl-hint",
         ["tool.cwl", "--variant", "c", "--size", "3"], "expo:Hardness",
         "value 'c' of 'variant' is missing from its declared order a<b", front="cwl",
         files={"tool.cwl": HINTED_TOOL.replace(
             "HINT", "    dimensions: [variant, size]\n    orders: {variant: [a, b]}")}),
    Case("cwl hint: unparsable deadline", "cwl-hint",
         ["tool.cwl", "--variant", "a", "--size", "3"], "expo:Hardness", "deadline",
         front="cwl", files={"tool.cwl": HINTED_TOOL.replace(
             "HINT", "    dimensions: [size]\n    deadline: soon")}),
    Case("cwl hint: skipAbove not a probability", "cwl-hint",
         ["tool.cwl", "--variant", "a", "--size", "3"], "hint expo:Hardness of tool.cwl",
         "skipAbove 1.5 is not a probability between 0 and 1", front="cwl",
         files={"tool.cwl": HINTED_TOOL.replace(
             "HINT", "    dimensions: [size]\n    deadline: 30s\n    skipAbove: 1.5")},
         fix="0 < P < 1"),
    Case("cwl hint: skipAbove with the model set to none", "cwl-hint",
         ["--expocloud-hardness-model", "none", "tool.cwl", "--variant", "a", "--size", "3"],
         "hint expo:Hardness of tool.cwl", "skipAbove needs a runtime model", front="cwl",
         files={"tool.cwl": HINTED_TOOL.replace(
             "HINT", "    dimensions: [size]\n    deadline: 30s\n    skipAbove: 0.99")},
         fix="drop skipAbove or the setting"),
    Case("cwl hint: skipAbove without a deadline", "cwl-hint",
         ["tool.cwl", "--variant", "a", "--size", "3"], "hint expo:Hardness of tool.cwl",
         "skipAbove needs a deadline to skip against", front="cwl",
         files={"tool.cwl": HINTED_TOOL.replace(
             "HINT", "    dimensions: [size]\n    skipAbove: 0.99")},
         fix="add deadline: to the hint"),
    Case("cwl hint: a label Google refuses", "cwl-hint", ["tool.cwl", "--size", "3"],
         "hint expo:Labels of tool.cwl", "label key 'Team' does not start with a lowercase letter",
         front="cwl", files={"tool.cwl": PLAIN_TOOL.replace(
             "class: CommandLineTool\n", "class: CommandLineTool\n"
             "$namespaces: {expo: \"https://expocloud.dev/cwl#\"}\n"
             "hints:\n  expo:Labels: {labels: \"Team=ml\"}\n")}),
    Case("cwl hint: labels that with the run's pass GCE's 64", "cwl-hint",
         [*CWL_GCE, "--default-storage-prefix", "gs://expocloud-bkt/wf", "--expocloud-gce-labels",
          ",".join(f"run{i}=x" for i in range(50)), "tool.cwl", "--size", "3"],
         "hint expo:Labels of tool.cwl", "with the run's --expocloud-gce-labels, more than 57",
         front="cwl", files={"tool.cwl": PLAIN_TOOL.replace(
             "class: CommandLineTool\n", "class: CommandLineTool\n"
             "$namespaces: {expo: \"https://expocloud.dev/cwl#\"}\n"
             "hints:\n  expo:Labels: {labels: \""
             + ",".join(f"tool{i}=y" for i in range(10)) + "\"}\n")}),
    # -- credentials (the real GCE path: no endpoint, no emulator, no route out) -----------
    Case("credentials: missing key file", "credentials", REAL_GCE, CRED, "is not a file",
         env={**OFFLINE, CRED: f"{TMP}/nowhere.json"}),
    Case("credentials: malformed JSON", "credentials", REAL_GCE, CRED,
         "is not a usable credentials file", files={"key.json": "{not json"},
         env={**OFFLINE, CRED: f"{TMP}/key.json"}),
    Case("credentials: JSON of the wrong type", "credentials", REAL_GCE, CRED,
         "is not a usable credentials file", files={"key.json": json.dumps({"type": "robot"})},
         env={**OFFLINE, CRED: f"{TMP}/key.json"}),
    Case("credentials: service account key without its key", "credentials", REAL_GCE, CRED,
         "is not a usable credentials file",
         files={"key.json": json.dumps({"type": "service_account", "client_email": "a@b"})},
         env={**OFFLINE, CRED: f"{TMP}/key.json"}),
    Case("credentials: none at all", "credentials", REAL_GCE, CRED,
         "no Application Default Credentials were found", env={**OFFLINE, CRED: ""}),
    Case("credentials: real GCS with the fake Compute", "credentials",
         [*GCE, "--expocloud-bucket", "gs://expocloud-bkt/wf"], CRED, "is not a file",
         env={**OFFLINE, CRED: f"{TMP}/nowhere.json"}),
    Case("credentials: cwl on the real GCE path", "credentials",
         ["--expocloud-engine", "gce", "--expocloud-gce-project", "p", "--expocloud-gce-zones",
          "us-central1-a", "--expocloud-max-workers", "2", "--default-storage-prefix",
          "gs://expocloud-bkt/wf", *WORKER, "tool.cwl", "--size", "1"], CRED, "is not a usable",
         front="cwl", files={"key.json": "[]", "tool.cwl": PLAIN_TOOL},
         env={**OFFLINE, CRED: f"{TMP}/key.json"}),
    # -- bucket names (GCS naming rules) ----------------------------------------------------
    Case("bucket: uppercase", "bucket", [*GCE, "--expocloud-bucket", "gs://MyBucket/p"],
         "--expocloud-bucket", "characters GCS refuses"),
    Case("bucket: too short", "bucket", [*GCE, "--expocloud-bucket", "gs://ab/p"],
         "--expocloud-bucket", "has 2 characters"),
    Case("bucket: too long", "bucket", [*GCE, "--expocloud-bucket", f"gs://{'b' * 64}/p"],
         "--expocloud-bucket", "has 64 characters"),
    Case("bucket: bad characters", "bucket", [*GCE, "--expocloud-bucket", "gs://my$bkt/p"],
         "--expocloud-bucket", "characters GCS refuses"),
    Case("bucket: starts with goog", "bucket",
         [*GCE, "--expocloud-bucket", "gs://goog-runs/p"], "--expocloud-bucket",
         "starts with 'goog'"),
    Case("bucket: contains google", "bucket",
         [*GCE, "--expocloud-bucket", "gs://my-g00gle-runs/p"], "--expocloud-bucket",
         "contains 'google'"),
    Case("bucket: an IP address", "bucket",
         [*GCE, "--expocloud-bucket", "gs://192.168.5.4/p"], "--expocloud-bucket",
         "is an IP address"),
    Case("bucket: empty name", "bucket", [*GCE, "--expocloud-bucket", "gs:///p"],
         "--expocloud-bucket", "no bucket name"),
    Case("bucket: ends with a dash", "bucket",
         [*GCE, "--expocloud-bucket", "gs://runs-/p"], "--expocloud-bucket",
         "characters GCS refuses"),
    Case("bucket: not on gcs", "bucket", [*GCE, "--expocloud-bucket", "s3://b/p"],
         "--expocloud-bucket", "is not a gs:// URL"),
    Case("bucket: default-storage-prefix uppercase (cwl)", "bucket",
         [*CWL_GCE, "--default-storage-prefix", "gs://Runs/wf", "tool.cwl", "--size", "1"],
         "default-storage-prefix", "characters GCS refuses", front="cwl",
         files={"tool.cwl": PLAIN_TOOL}),
    Case("bucket: default-storage-prefix an IP address (cwl)", "bucket",
         [*CWL_GCE, "--default-storage-prefix", "gs://10.0.0.1/wf", "tool.cwl", "--size", "1"],
         "default-storage-prefix", "is an IP address", front="cwl",
         files={"tool.cwl": PLAIN_TOOL}),
]
