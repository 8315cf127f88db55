"""``expocloud-cwl``: cwltool's command line, with every command run by expocloud workers.

It accepts all of cwltool's options plus the engine settings of the Snakemake plugin, under the
same names (``--expocloud-engine gce``, ``--expocloud-max-workers``...) and from the same
profiles (``--expocloud-profile profiles/gce-spot``), and calls ``cwltool.main.main`` with our
executor and hint schema, as arvados-cwl-runner does. Settings are checked before the workflow
loads, and the hints when it loads: a mistake costs nothing.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import sys
import typing
from pathlib import Path

import yaml
from cwltool.argparser import arg_parser
from cwltool.context import LoadingContext
from cwltool.loghandler import _logger
from cwltool.main import main as cwltool_main

from expo_executor.coordinator.launch import max_workers, start_coordinator
from expo_executor.runs.files import RunFiles
from expo_executor.coordinator.measured_on import measured_on
from expo_executor.coordinator.settings import ExecutorSettings, validate, worker_memory_mb
from expo_executor.coordinator.state import StateDir
from expo_executor.core.errors import ExpoError
from expo_executor.core.records import EngineName
from expo_executor.engines.gce.settings import labels, needs_credentials, pool_machine_types
from expo_executor.engines.gce.settings_checks import check_credentials
from expo_executor.frontends.cwl.executor import ExpoExecutor
from expo_executor.frontends.cwl.hints import Containers, make_tool, register_schema
from expo_executor.settings.values import hardness_noise, with_default_slots

PREFIX = "expocloud-"
ON_TIMEOUT = ("skipped", "permanentFail")
STAGING = ("auto", "shared", "bucket")
RUNTIMES = ("auto", "podman", "docker", "none")
# Snakemake profile keys that mean nothing to a CWL run: accepted and ignored, so one profile
# serves both front ends (docs/cwl.md lists them; any other key is an error). ``retries`` is
# here because the shipped profiles invite it.
SNAKEMAKE_ONLY = {"executor", "jobs", "keep-going", "set-resources", "shared-fs-usage",
                  "default-storage-provider", "storage-gcs-project", "envvars",
                  "expocloud-on-skip", "expocloud-placeholder-text", "workflow-profile",
                  "default-resources", "latency-wait", "rerun-incomplete", "printshellcmds",
                  "retries"}


def _fields() -> list[dataclasses.Field]:
    return [f for f in dataclasses.fields(ExecutorSettings) if f.name not in
            ("on_skip", "placeholder_text")]


def build_parser() -> argparse.ArgumentParser:
    parser = arg_parser()
    parser.prog = "expocloud-cwl"
    parser.description = ("Run a CWL workflow with cwltool, every command on expocloud workers "
                          "(local processes, or GCE VMs with --expocloud-engine gce).")
    group = parser.add_argument_group("expocloud", "Where and how commands run (as for "
                                      "'snakemake --executor expocloud').")
    group.add_argument("--expocloud-profile", metavar="DIR",
                       help="a profile directory (or its config.yaml) whose expocloud-* keys "
                       "and default-storage-prefix become defaults here")
    group.add_argument("--expocloud-on-timeout", choices=ON_TIMEOUT, default="skipped",
                       help="a timed-out job of a tool with an expo:Hardness hint: 'skipped' "
                       "(all outputs null, as if its 'when' were false; default) or "
                       "'permanentFail' (as cwltool reports it)")
    group.add_argument("--expocloud-staging", choices=STAGING, default="auto",
                       help="how files reach workers: 'shared' (this machine's file system), "
                       "'bucket' (through the coordination bucket); auto: shared locally, "
                       "bucket on GCE")
    group.add_argument("--expocloud-container-runtime", choices=RUNTIMES, default="auto",
                       help="what runs a DockerRequirement's container on the workers: "
                       "'podman' or 'docker' (cwltool's own command for it), 'none'; auto: "
                       "this machine's podman, else docker, on the local engine, none on GCE "
                       "(name the one the worker image has)")
    group.add_argument("--default-storage-prefix", metavar="gs://BUCKET/PREFIX",
                       help="GCE: where the run coordinates and stages (as in Snakemake)")
    for f in _fields():
        flag = "--" + PREFIX + f.name.replace("_", "-")
        meta = dict(f.metadata)
        kwargs: dict = {"help": meta.get("help"), "dest": "expocloud_" + f.name,
                        "default": f.default}
        if _base_type(f.type) is bool:
            kwargs["action"] = "store_true"
        else:
            kwargs["type"] = meta.get("type", _base_type(f.type))
            if "choices" in meta:
                kwargs["choices"] = meta["choices"]
        group.add_argument(flag, **kwargs)
    return parser


def _base_type(annotation: object) -> type:
    """``Optional[int]`` -> ``int``; a plain type stays as it is."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    return args[0] if args else annotation  # type: ignore[return-value]


def profile_defaults(path: str, parser: argparse.ArgumentParser) -> dict:
    """The profile's settings as parser defaults; raises ExpoError on an unknown key."""
    config = Path(path)
    if config.is_dir():
        config = config / "config.yaml"
    try:
        data = yaml.safe_load(config.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ExpoError("--expocloud-profile", f"cannot read {config}: {exc}",
                        "give a profile directory holding a config.yaml") from None
    actions = {a.dest: a for a in parser._actions}
    dests = set(actions)
    defaults = {}
    for key, value in data.items():
        dest = str(key).replace("-", "_")
        if key in SNAKEMAKE_ONLY:
            continue
        if dest not in dests or not (str(key).startswith(PREFIX)
                                     or key == "default-storage-prefix"):
            raise ExpoError(f"{key} in {config}", "is not a setting expocloud-cwl knows",
                            "remove it or correct its name (expocloud-cwl --help lists them)")
        defaults[dest] = _profile_value(f"{key} in {config}", value, actions[dest])
    return defaults


def _profile_value(setting: str, value: object, action: argparse.Action) -> object:
    """A profile value checked as its command-line flag would be, with the fix in one line
    (argparse would check a default only if it were a string, and then without the file)."""
    if value is None:
        return None
    if action.nargs == 0:  # a flag
        if not isinstance(value, bool):
            raise ExpoError(setting, f"{value!r} is not true or false", "write true or false")
        return value
    if isinstance(value, (list, dict, bool)):
        raise ExpoError(setting, f"{value!r} is not a single value",
                        "give one value, as on the command line")
    kind = action.type if callable(action.type) else str
    try:
        converted = kind(str(value))
    except (TypeError, ValueError):
        word = {int: "a whole number", float: "a number"}.get(kind, "a valid value")
        raise ExpoError(setting, f"{value!r} is not {word}", f"give {word}") from None
    if action.choices is not None and converted not in action.choices:
        raise ExpoError(setting, f"{value!r} is not one of {', '.join(map(str, action.choices))}",
                        f"use one of {', '.join(map(str, action.choices))}")
    return converted


def settings_from(args: argparse.Namespace) -> ExecutorSettings:
    settings = ExecutorSettings(**{f.name: getattr(args, "expocloud_" + f.name)
                                   for f in _fields()})
    # Locally, one worker with all the cores, so that ResourceRequirement packs jobs as
    # cwltool's own executor would (a tool may ask for several cores).
    return with_default_slots(settings)


def staging_root(args: argparse.Namespace, settings: ExecutorSettings,
                 run_dir: Path) -> Path | None:
    """Where every job path lies when files travel through the bucket; None when shared."""
    mode = args.expocloud_staging
    if mode == "auto":
        mode = "bucket" if settings.engine == EngineName.GCE else "shared"
    if mode == "shared":
        return None
    root = run_dir / "cwl"
    root.mkdir(parents=True, exist_ok=True)
    # cwltool creates every job directory under these prefixes: one root, rebased on workers
    args.tmpdir_prefix = args.tmp_outdir_prefix = f"{root}/"
    return root


def containers(args: argparse.Namespace, settings: ExecutorSettings) -> Containers | None:
    """The workers' container runtime, and cwltool's options set to use it (or not); None
    after cwltool's own --no-container, whose refusal of a DockerRequirement is cwltool's."""
    if not args.use_container:
        return None
    choice = args.expocloud_container_runtime
    if choice == "auto" and settings.engine == EngineName.GCE:
        found = Containers(None, "on GCE the worker image's runtime is not known")
    elif choice == "auto":
        runtime = shutil.which("podman") and "podman" or shutil.which("docker") and "docker"
        found = Containers(runtime or None, "this machine has neither on its PATH")
    elif choice == "none":
        found = Containers(None, "--expocloud-container-runtime is none")
    else:
        found = Containers(choice)
    args.use_container = found.runtime is not None
    args.podman = found.runtime == "podman"
    return found


def check(args: argparse.Namespace, settings: ExecutorSettings) -> None:
    """Everything that can be wrong with the settings, before the workflow loads."""
    validate(settings)
    if settings.engine == EngineName.GCE and args.expocloud_staging == "shared":
        raise ExpoError("--expocloud-staging", "GCE workers share no file system with this "
                        "machine", "use --expocloud-staging bucket (the default on GCE)")
    if settings.engine == EngineName.GCE:  # the coordination prefix, checked as the run will build it
        from expo_executor.engines.gce.launch import coordination_url
        coordination_url(settings, args.default_storage_prefix, "check")
    if settings.engine == EngineName.GCE and "auto" in pool_machine_types(settings):
        # cwltool reveals a workflow's jobs (and their cores and RAM) only as it runs them
        raise ExpoError("--expocloud-machine-type", "'auto' needs the jobs before the run, and "
                        "a CWL workflow reveals them only as it runs", "name a machine type "
                        "(see 'expocloud prices'; a Snakemake run's log shows what auto chose)")
    if needs_credentials(settings):  # last: every setting's own error comes first
        check_credentials()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--expocloud-profile")
    known, _ = pre.parse_known_args(argv)
    try:
        if known.expocloud_profile:
            parser.set_defaults(**profile_defaults(known.expocloud_profile, parser))
        args = parser.parse_args(argv)
        settings = settings_from(args)
        check(args, settings)
        worker_mem_mb = worker_memory_mb(settings, max_workers(settings))
    except ExpoError as exc:
        print(f"expocloud-cwl: {exc}", file=sys.stderr)
        return 2
    state = StateDir(Path(settings.state_dir).resolve())
    try:
        run_dir = state.new_run(settings.run_id)
    except FileExistsError:
        print(f"expocloud-cwl: {ExpoError('--expocloud-run-id', f'run {settings.run_id!r} exists already', 'choose a new run id')}",
              file=sys.stderr)
        return 2
    root = staging_root(args, settings, run_dir)
    found = containers(args, settings)
    workflow = os.path.abspath(args.workflow) if args.workflow else ""

    def start():
        _logger.info(f"expocloud: run {run_dir.name} on the {settings.engine} engine "
                     f"(state in {run_dir})")
        if executor.skip_hinted and settings.hardness_model is None:
            _logger.info("expocloud: the learned runtime model is on: the expo:Hardness hint of "
                         f"{', '.join(executor.skip_hinted)} gives skipAbove")
        return start_coordinator(settings, run_dir, state, _logger.info,
                                 args.default_storage_prefix,
                                 skip_hinted=bool(executor.skip_hinted))

    executor = ExpoExecutor(start, workflow, settings.slots_per_worker, root,
                            args.expocloud_on_timeout, worker_mem_mb, RunFiles(run_dir),
                            measured_on(settings),
                            pool_machine_types(settings)[0]
                            if settings.engine == EngineName.GCE else None,
                            hardness_noise(settings))
    executor.open_run(settings.engine, settings, cwl=workflow)
    loading = LoadingContext(vars(args))
    loading.construct_tool_object = make_tool
    loading.expo_containers = found  # type: ignore[attr-defined]  # read by SweepTool
    # a hint's skipAbove is refused as its tool loads when the model is set to 'none'
    loading.expo_hardness_model = settings.hardness_model  # type: ignore[attr-defined]
    # the run's labels, which every VM carries: a tool's expo:Labels are counted with them
    loading.expo_run_labels = labels(settings) \
        if settings.engine == EngineName.GCE else {}  # type: ignore[attr-defined]
    try:
        return cwltool_main(args=args, executor=executor, loadingContext=loading,
                            custom_schema_callback=register_schema)
    finally:
        if executor.coordinator is not None:
            executor.coordinator.stop()
        executor.close_run()


if __name__ == "__main__":
    sys.exit(main())
