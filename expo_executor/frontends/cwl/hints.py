"""Our CWL hints: the schema extension, and what a tool's hints say about each of its jobs.

``expo:Hardness`` names the input parameters forming ordered dimensions (numbers, or declared orders
for categorical values), an optional scope, a deadline for tools without ``ToolTimeLimit``, and the
inputs the runtime model treats as noise (``noise``: a seed, an instance; else the run's
``--expocloud-hardness-noise``), and the tool's own model-skip threshold (``skipAbove``: else the
run's ``--expocloud-skip-above``; a hint that gives one turns the learned model on, see
:func:`skip_hinted`). ``expo:Preemptible`` says how many Spot preemptions a job may
suffer before it runs on-demand (0: never on Spot); the Arvados ``arv:UsePreemptible`` hint is
honoured as other runners honour it. Hints usually sit on a workflow step, so a published tool is
swept without being edited. ``expo:Labels`` gives a tool's jobs GCE labels for the bill, and so VMs
of their own (``coordinator.shapes.rule_labels``: checked by Google's rules as the tool loads).

A hint is checked twice before any job runs: its shape by schema salad when the document loads
(``extensions.yml``), its meaning (known inputs, a declared order for non-numeric ones) when
cwltool builds the tool (``SweepTool``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from importlib.resources import files
from typing import Any, Mapping

from cwltool.command_line_tool import CommandLineTool
from cwltool.context import LoadingContext, RuntimeContext
from cwltool.errors import WorkflowException
from cwltool.job import CommandLineJob, ContainerCommandLineJob, JobBase
from cwltool.process import shortname, use_custom_schema
from cwltool.update import ALLUPDATES
from cwltool.workflow import default_make_tool
from schema_salad.exceptions import ValidationException

from expo_executor.coordinator.shapes import rule_labels
from expo_executor.core.errors import ExpoError
from expo_executor.core.hardness import Dimension, HardnessPoint, HardnessSpec, parse_duration
from expo_executor.core.scheduler import SkipRule

NAMESPACE = "https://expocloud.dev/cwl"
HARDNESS = f"{NAMESPACE}#Hardness"
PREEMPTIBLE = f"{NAMESPACE}#Preemptible"
LABELS = f"{NAMESPACE}#Labels"
ARV_PREEMPTIBLE = "http://arvados.org/cwl#UsePreemptible"
DOCKER = "DockerRequirement"
NUMERIC = {"int", "long", "float", "double"}


def register_schema() -> None:
    """cwltool's ``custom_schema_callback``: our extension, for every CWL version it accepts."""
    text = files("expo_executor.frontends.cwl").joinpath("extensions.yml").read_text("utf-8")
    for version in ALLUPDATES:
        use_custom_schema(version, NAMESPACE, text)


@dataclass(frozen=True)
class Containers:
    """Whether workers run containers: the runtime's executable, or why there is none (the
    reason ends with the fix). Set on the LoadingContext as ``expo_containers``."""

    runtime: str | None
    why_not: str = ""


def check_containers(tool_id: str, requirements: list[dict], containers: Containers | None) -> None:
    """A DockerRequirement (not a hint) needs a container runtime on the workers: refused as
    the tool loads, before any VM, when there is none. A DockerRequirement hint without one
    runs the command bare, as cwltool does with --no-container."""
    if containers is None or containers.runtime is not None:
        return
    if any(r.get("class") == DOCKER for r in requirements):
        raise ExpoError(f"{DOCKER} of {tool_id}", f"needs docker or podman on the workers: "
                        f"{containers.why_not}", "set --expocloud-container-runtime podman or "
                        "docker (the workers must have it), or make DockerRequirement a hint")


@dataclass(frozen=True)
class Sweep:
    """A tool's hardness hint, resolved against its inputs."""

    spec: HardnessSpec
    deadline_s: float | None
    noise: tuple[str, ...] = ()  # inputs the runtime model treats as noise (a seed, ...)
    skip: SkipRule | None = None  # the hint's skipAbove; None: the run's --expocloud-skip-above

    def point(self, values: Mapping[str, Any], setting: str) -> HardnessPoint:
        return self.spec.point({name: param_text(values.get(name)) for name in self.spec.names},
                               setting)

    def describe(self, values: Mapping[str, Any]) -> str:
        return self.spec.describe({n: param_text(values.get(n)) for n in self.spec.names})


def param_text(value: Any) -> str:
    """A parameter value as a dimension reads it (integral floats as integers)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return str(int(value))
    return str(value)


def _hint(hints: list[dict], cls: str) -> dict | None:
    """The last matching hint: a tool's own hints come after its step's and win."""
    found = [h for h in hints if h.get("class") == cls]
    return found[-1] if found else None


def read_sweep(tool_id: str, inputs: list[dict], hints: list[dict]) -> Sweep | None:
    """The tool's Hardness hint, checked against its inputs; raises ExpoError on a defect."""
    hint = _hint(hints, HARDNESS)
    if hint is None:
        return None
    setting = f"hint expo:Hardness of {tool_id}"
    types = {shortname(i["id"]): i["type"] for i in inputs}
    orders = {o["parameter"]: tuple(str(v) for v in o["easiestFirst"])
              for o in hint.get("orders") or []}
    dims = []
    for name in hint["dimensions"]:
        if name not in types:
            raise _unknown(setting, name, types)
        if name not in orders and not _numeric(types[name]):
            raise ExpoError(setting, f"input '{name}' is not numeric ({_type_text(types[name])}) "
                            "and has no declared order",
                            f"add orders: {{{name}: [easiest, ..., hardest]}}")
        dims.append(Dimension(name, orders.get(name)))
    noise = tuple(hint.get("noise") or ())
    for name in list(orders) + list(hint.get("scope") or []) + list(noise):
        if name not in types:
            raise _unknown(setting, name, types)
    for name in orders:
        if name not in hint["dimensions"]:
            raise ExpoError(setting, f"orders names '{name}', which is not a dimension",
                            f"add '{name}' to dimensions or remove its order")
    spec = HardnessSpec(tuple(dims), tuple(hint.get("scope") or ()))
    HardnessSpec.parse(spec.text, setting)  # the same checks as a Snakemake spec (names, repeats)
    deadline = hint.get("deadline")
    return Sweep(spec, parse_duration(deadline, f"{setting}: deadline")
                 if deadline is not None else None, noise, _skip_rule(tool_id, hint, setting))


def _skip_rule(tool_id: str, hint: Mapping[str, Any], setting: str) -> SkipRule | None:
    """The hint's skipAbove, a probability strictly between 0 and 1 (as the run's setting)."""
    above = hint.get("skipAbove")
    if above is None:
        return None
    if isinstance(above, bool) or not 0 < above < 1:
        raise ExpoError(setting, f"skipAbove {above!r} is not a probability between 0 and 1",
                        "give a P with 0 < P < 1, e.g. 0.99, or drop skipAbove")
    return SkipRule(float(above), f"expo:Hardness skipAbove of {tool_id}")


def check_skip_model(tool_id: str, sweep: Sweep | None, model: str | None,
                     time_limited: bool) -> None:
    """A skipAbove needs a runtime model and a deadline to skip against: refused as the tool
    loads when the run's ``--expocloud-hardness-model`` (``model``, None when not given) is
    'none', or when neither the hint nor a ToolTimeLimit (``time_limited``) gives a deadline
    (the model then has no family to learn, and would skip nothing, silently)."""
    if sweep is None or sweep.skip is None:
        return
    setting = f"hint expo:Hardness of {tool_id}"
    if model == "none":
        raise ExpoError(setting, "skipAbove needs a runtime model, "
                        "and --expocloud-hardness-model is 'none'", "drop skipAbove or the "
                        "setting (the model is 'learned' when a hint gives skipAbove)")
    if sweep.deadline_s is None and not time_limited:
        raise ExpoError(setting, "skipAbove needs a deadline to skip against, and the tool has "
                        "none", "add deadline: to the hint (e.g. deadline: 10m) or a "
                        "ToolTimeLimit, or drop skipAbove")


def skip_hinted(process: Any) -> tuple[str, ...]:
    """The tools under ``process`` (a tool or a workflow, walked into its steps) whose
    expo:Hardness hint gives skipAbove: the run's model is turned on for them (a skip needs
    one), as ``--expocloud-skip-above`` turns it on. cwltool builds every step's tool as the
    workflow loads, so the walk sees them all before the first job."""
    if isinstance(process, SweepTool):
        return (process.name,) if process.sweep and process.sweep.skip else ()
    found: tuple[str, ...] = ()
    for step in getattr(process, "steps", ()):
        found += skip_hinted(getattr(step, "embedded_tool", None))
    return found


def spot_attempts(hints: list[dict]) -> int | None:
    """Preemptions allowed before on-demand: 0 never on Spot, None the run's default."""
    ours = _hint(hints, PREEMPTIBLE)
    if ours is not None:
        return max(0, int(ours["spotAttempts"]))
    arvados = _hint(hints, ARV_PREEMPTIBLE)
    if arvados is not None and not arvados.get("usePreemptible", True):
        return 0
    return None


def labels(tool_id: str, hints: list[dict], run_labels: Mapping[str, str] | None = None
           ) -> tuple[tuple[str, str], ...]:
    """The tool's expo:Labels, with its name as ``expocloud-rule``; () without the hint.
    Raises ExpoError naming the hint on a label Google refuses, or when with ``run_labels``
    (the run's ``--expocloud-gce-labels``, which its VMs carry too) they are more than a VM
    may have beside the executor's own, as a Snakemake rule's ``gce_labels`` are checked."""
    hint = _hint(hints, LABELS)
    return () if hint is None else rule_labels(tool_id, hint.get("labels"), run_labels or {},
                                               f"hint expo:Labels of {tool_id}")


def _numeric(cwl_type: Any) -> bool:
    if isinstance(cwl_type, list):  # e.g. ["null", "int"]
        kinds = [t for t in cwl_type if t != "null"]
        return bool(kinds) and all(_numeric(t) for t in kinds)
    return isinstance(cwl_type, str) and cwl_type in NUMERIC


def _type_text(cwl_type: Any) -> str:
    if isinstance(cwl_type, dict):
        return str(cwl_type.get("type", "record"))
    if isinstance(cwl_type, list):
        return "|".join(_type_text(t) for t in cwl_type)
    return str(cwl_type)


def _unknown(setting: str, name: str, types: Mapping[str, Any]) -> ExpoError:
    return ExpoError(setting, f"names the unknown input '{name}' (the tool's inputs: "
                     f"{', '.join(sorted(types)) or 'none'})", "use the tool's own input names")


class SweepTool(CommandLineTool):
    """A CommandLineTool whose sweep hints are checked as it is built, before any job runs."""

    def __init__(self, toolpath_object: Any, loadingContext: LoadingContext) -> None:
        super().__init__(toolpath_object, loadingContext)
        try:
            self.sweep = read_sweep(shortname(self.tool["id"]), self.tool["inputs"], self.hints)
            check_containers(shortname(self.tool["id"]), self.requirements,
                             getattr(loadingContext, "expo_containers", None))
            self.labels = labels(shortname(self.tool["id"]), self.hints,
                                 getattr(loadingContext, "expo_run_labels", None))
            check_skip_model(shortname(self.tool["id"]), self.sweep,
                             getattr(loadingContext, "expo_hardness_model", None),
                             any(r.get("class") == "ToolTimeLimit"
                                 for r in [*self.requirements, *self.hints]))
        except ExpoError as exc:
            raise ValidationException(str(exc)) from None
        self.spot_attempts = spot_attempts(self.hints)
        self.output_names = [shortname(o["id"]) for o in self.tool["outputs"]]
        self.name = shortname(self.tool["id"])
        self._job_classes: dict[type, type[JobBase]] = {}

    def make_job_runner(self, runtimeContext: RuntimeContext) -> type[JobBase]:
        """Our job class, which knows its tool: cwltool's own (bare, or docker/podman, whose
        ``create_runtime`` builds the container command the worker runs)."""
        runner = super().make_job_runner(runtimeContext)
        if runner is not CommandLineJob and not issubclass(runner, ContainerCommandLineJob):
            raise WorkflowException(f"expocloud-cwl runs commands bare or in docker/podman, "
                                    f"not with {runner.__name__}: drop --singularity or "
                                    "--user-space-docker-cmd")
        if runner not in self._job_classes:
            bases = (SweepJob,) if runner is CommandLineJob else (runner, SweepJob)
            self._job_classes[runner] = type("SweepJob", bases, {"tool": self})
        return self._job_classes[runner]


class SweepJob(CommandLineJob):
    """A command-line job that knows the tool (and so the hints) it came from."""

    tool: SweepTool


def make_tool(toolpath_object: Any, loadingContext: LoadingContext) -> Any:
    """cwltool's ``construct_tool_object``: our CommandLineTool, everything else as usual."""
    if isinstance(toolpath_object, dict) and toolpath_object.get("class") == "CommandLineTool":
        return SweepTool(toolpath_object, loadingContext)
    return default_make_tool(toolpath_object, loadingContext)
