"""The preemption model fitted to what our runs recorded: the Spot VMs' lifetimes read from
every run's ``vms.jsonl``, a Kaplan-Meier curve and a least-squares fit of eq. 1 to it,
``<state-dir>/preemption.json`` (the fitted models, with default priors for the rest) and the
``expocloud fit-preemption`` command that writes it. The model itself is ``preemption``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from expo_executor.core.errors import ExpoError
from expo_executor.core.records import VmEnd
from expo_executor.cost.preemption import MODELS_FILE, Bathtub, default_model, positive, require
from expo_executor.runs.files import VMS as VMS_FILE
from expo_executor.runs.files import read_jsonl

#: Fewer preemptions than this for a machine type and a four-parameter fit is noise: we keep
#: the default prior instead (and say so).
MIN_EVENTS = 5


# -- fitting --------------------------------------------------------------------------------

def _check_observations(lifetimes_h: Sequence[float], preempted: Sequence[bool]) -> None:
    require(len(lifetimes_h) == len(preempted), "preempted",
           f"{len(preempted)} flags for {len(lifetimes_h)} lifetimes", "pass one flag per VM")
    bad = [t for t in lifetimes_h if not (math.isfinite(t) and t >= 0.0)]
    require(not bad, "lifetimes_h", f"{bad[0] if bad else ''} is not a lifetime",
           "pass VM lifetimes in hours (>= 0)")


def kaplan_meier(lifetimes_h: Sequence[float],
                 preempted: Sequence[bool]) -> list[tuple[float, float]]:
    """The empirical lifetime CDF, (t, F(t)) at each preemption time, with right censoring.

    VMs that we deleted, that reached the cap or that we lost track of were not preempted;
    all we know is that they lived at least that long. Counting them as preemptions would make
    every early deletion (end of a sweep, a scale-down) look like an early preemption; dropping
    them would bias towards short lives. Kaplan-Meier keeps them in the risk set until then.
    """
    _check_observations(lifetimes_h, preempted)
    pairs = sorted(zip(lifetimes_h, preempted))
    at_risk = len(pairs)
    survival = 1.0
    curve: list[tuple[float, float]] = []
    i = 0
    while i < len(pairs):
        t = pairs[i][0]
        events = ended = 0
        while i < len(pairs) and pairs[i][0] == t:
            events += bool(pairs[i][1])
            ended += 1
            i += 1
        if events:  # events before censorings at the same time: the censored were at risk
            survival *= 1.0 - events / at_risk
            curve.append((t, 1.0 - survival))
        at_risk -= ended
    return curve


def fit(lifetimes_h: Sequence[float], preempted: Sequence[bool], cap_h: float = 24.0,
        machine_type: str = "") -> Bathtub:
    """Least-squares fit of eq. 1 to the Kaplan-Meier CDF (as the paper fits, by least squares).

    Lifetimes at or past cap_h count as reaching the cap (censored there). With fewer than
    MIN_EVENTS preemptions there is nothing to fit and this returns ``default_model(
    machine_type, cap_h)`` instead; callers that must tell the two apart count the events.
    Each KM step is fitted at its midpoint, which removes the half-step bias of a step
    function; several starting points guard against local minima, and the best is kept.
    """
    require(positive(cap_h), "cap_h", f"{cap_h!r} is not a positive duration",
           "pass the VMs' maximum lifetime in hours, e.g. 24")
    _check_observations(lifetimes_h, preempted)
    times = [min(t, cap_h) for t in lifetimes_h]
    events = [bool(p) and t < cap_h for t, p in zip(lifetimes_h, preempted)]
    if sum(events) < MIN_EVENTS:
        return default_model(machine_type, cap_h)

    # Imported here: scipy takes a while to import and only fitting needs it.
    import numpy as np
    from scipy.optimize import least_squares

    curve = kaplan_meier(times, events)
    t = np.array([p[0] for p in curve])
    upper = np.array([p[1] for p in curve])
    lower = np.concatenate(([0.0], upper[:-1]))
    y = 0.5 * (upper + lower)

    def residuals(x: Any) -> Any:
        tau1, tau2, b, a = x
        late = np.exp(np.minimum((t - b) / tau2, 50.0))
        return a * (1.0 - np.exp(-t / tau1) + late) - y

    lo = [1e-3 * cap_h, 1e-4 * cap_h, 1e-3 * cap_h, 1e-4]
    hi = [100.0 * cap_h, cap_h, 1.5 * cap_h, 1.0]
    best = None
    for tau1 in (cap_h / 24, cap_h / 6, cap_h / 2, 2 * cap_h):
        for b in (0.97 * cap_h, 1.02 * cap_h):
            for a in (0.3, 0.7):
                x0 = [tau1, cap_h / 48, b, a]
                try:
                    result = least_squares(residuals, x0, bounds=(lo, hi), x_scale="jac")
                except (ValueError, FloatingPointError):
                    continue
                if np.all(np.isfinite(result.x)) and (best is None or result.cost < best.cost):
                    best = result
    if best is None:
        return default_model(machine_type, cap_h)
    tau1, tau2, b, a = (float(v) for v in best.x)
    return Bathtub(tau1=tau1, tau2=tau2, b=b, A=a, cap_h=cap_h)


# -- models and lifetimes on disk -----------------------------------------------------------

@dataclass(frozen=True)
class Models:
    """The fitted models of ``preemption.json``, with default priors for everything else."""

    entries: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    cap_h: float = 24.0

    def _fitted(self, machine_type: str, region: str = "") -> Mapping[str, Any] | None:
        for key in ([region_key(machine_type, region)] if region else []) + [machine_type]:
            entry = self.entries.get(key)
            if entry and entry.get("fitted"):
                return entry
        return None

    def for_type(self, machine_type: str, region: str = "") -> Bathtub:
        """The fitted model of this machine type in ``region`` if there is one (a run across
        regions records each VM's), else the type's, else the default prior."""
        entry = self._fitted(machine_type, region)
        return Bathtub.from_dict(entry) if entry else default_model(machine_type, self.cap_h)

    def source(self, machine_type: str) -> str:
        """Where for_type()'s model comes from, for reports and logs."""
        entry = self._fitted(machine_type)
        if not entry:
            return "default prior"
        return f"fitted on {entry.get('vms', '?')} VMs ({entry.get('preemptions', '?')} preemptions)"


def region_key(machine_type: str, region: str) -> str:
    """The key of a machine type's model fitted to one region's VMs: ``e2-standard-2@us-east1``."""
    return f"{machine_type}@{region}"


def _read_models_file(state_dir: Path) -> dict[str, dict[str, Any]]:
    path = Path(state_dir) / MODELS_FILE
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ExpoError(MODELS_FILE, f"{path} is unreadable ({exc})",
                        "delete it and rerun `expocloud fit-preemption`") from None
    require(isinstance(data, dict) and all(isinstance(v, dict) for v in data.values()),
           MODELS_FILE, f"{path} is not a mapping of machine type to model",
           "delete it and rerun `expocloud fit-preemption`")
    return data


def load_models(state_dir: Path, cap_h: float = 24.0) -> Models:
    """``state_dir/preemption.json`` ({machine_type: {tau1, tau2, b, A, cap_h, vms, ...}})."""
    entries = _read_models_file(state_dir)
    for entry in entries.values():
        if entry.get("fitted"):
            Bathtub.from_dict(entry)  # a broken entry fails here, not mid-run
    return Models(entries=entries, cap_h=cap_h)


def lifetimes(state_dir: Path) -> dict[str, tuple[list[float], list[bool]]]:
    """Spot VM lifetimes (h) and preempted flags per machine type, from every run's vms.jsonl,
    and per machine type and region (``region_key``) for the VMs whose record names it.

    Only Spot VMs: on-demand and local workers are never preempted. Skipped: VMs that were
    never created, records without a machine type (older runs) or without both timestamps,
    and lines that do not parse (a run killed mid-write leaves a torn last line). Only
    ``end == "preempted"`` is a preemption; deleted, capped and lost VMs are censored.
    """
    out: dict[str, tuple[list[float], list[bool]]] = {}
    for path in sorted((Path(state_dir) / "runs").glob(f"*/{VMS_FILE}")):
        for rec in read_jsonl(path):
            if rec.get("pool") != "spot" \
                    or rec.get("end") == VmEnd.NOT_CREATED.value or not rec.get("machine_type"):
                continue
            created, ended = rec.get("created"), rec.get("ended")
            if not (isinstance(created, (int, float)) and isinstance(ended, (int, float))) \
                    or ended < created:
                continue
            keys = [str(rec["machine_type"])]
            if rec.get("region"):  # also fitted per region (region_key), where it ran
                keys.append(region_key(keys[0], str(rec["region"])))
            for key in keys:
                times, flags = out.setdefault(key, ([], []))
                times.append((ended - created) / 3600.0)
                flags.append(rec.get("end") == VmEnd.PREEMPTED.value)
    return out


# -- `expocloud fit-preemption` -------------------------------------------------------------

def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Adds ``fit-preemption`` to the ``expocloud`` subcommands."""
    parser = sub.add_parser("fit-preemption",
                            help="fit the Spot preemption model per machine type to the VM "
                                 "lifetimes recorded by past runs")
    parser.add_argument("--state-dir", type=Path, default=Path(".expocloud"),
                        help="the workflow's state directory (default: .expocloud)")
    parser.add_argument("--cap-hours", type=float, default=24.0,
                        help="the VMs' maximum lifetime in hours (default: 24)")
    parser.add_argument("--dry-run", action="store_true",
                        help=f"print the fits without writing {MODELS_FILE}")
    return parser


def _write_atomic(path: Path, text: str) -> None:
    """Write-then-rename, so that a concurrent reader never sees half a file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def run(args: argparse.Namespace) -> int:
    """Fits every machine type, writes preemption.json, prints one line per type.

    Machine types without lifetimes in the current runs keep their earlier entry.
    """
    cap_h = args.cap_hours
    require(positive(cap_h), "--cap-hours", f"{cap_h} is not a positive duration",
           "pass the VMs' maximum lifetime in hours, e.g. 24")
    state_dir = Path(args.state_dir)
    data = lifetimes(state_dir)
    if not data:
        print(f"no Spot VM lifetimes under {state_dir / 'runs'}; nothing to fit")
        return 0
    entries = _read_models_file(state_dir)
    for machine_type in sorted(data):
        times, flags = data[machine_type]
        events = sum(1 for t, p in zip(times, flags) if p and t < cap_h)
        fitted = events >= MIN_EVENTS
        model = fit(times, flags, cap_h, machine_type.split("@", 1)[0])
        entries[machine_type] = {**model.to_dict(), "vms": len(times), "preemptions": events,
                                 "fitted": fitted}
        line = (f"{machine_type}: {len(times)} VMs, {events} preemptions, "
                f"tau1={model.tau1:.3g} h, tau2={model.tau2:.3g} h, b={model.b:.3g} h, "
                f"A={model.A:.3g}, E[L]={model.expected_lifetime_h():.2f} h")
        if not fitted:
            line += f", default prior ({events} < MIN_EVENTS={MIN_EVENTS} preemptions)"
        print(line)
    if args.dry_run:
        print(f"dry run: {state_dir / MODELS_FILE} not written")
    else:
        state_dir.mkdir(parents=True, exist_ok=True)
        _write_atomic(state_dir / MODELS_FILE, json.dumps(entries, indent=2, sort_keys=True) + "\n")
        print(f"wrote {state_dir / MODELS_FILE}")
    return 0
