"""What outlives a run, under ``.expocloud/``: run directories, frontiers (each with its
family's runtime model, when the run had one), placeholders.

The frontier is stored per workflow, rule, hardness spec, engine and machine (where the
timeout was measured: coordinator/measured_on.py), so that a rerun on the same kind of machine
skips known-hopeless combinations at once, and a laptop's timeout never prunes a GCE run. A
timeout recorded with a deadline at least as long as today's still holds (it would time out
again); one recorded with a shorter deadline does not, so raising the deadline explores again.
Frontier files written before engine and machine were part of the key apply to the local
engine only (on any host: they cannot say which).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import hashlib
import json
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from expo_executor.core.hardness import Frontier, HardnessPoint
from expo_executor.runs.atomic import write_atomically


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created if missing) across processes: a
    read-modify-write under it cannot lose another process's change."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _write_json(path: Path, data: object) -> None:
    write_atomically(path, json.dumps(data, indent=1, sort_keys=True))


def _read_json(path: Path, default: object) -> object:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return default


@dataclass(frozen=True)
class FamilyRef:
    """Which frontier a task belongs to: tasks of one rule, spec and deadline, timed on one
    engine and machine, share one."""

    workflow: str
    rule: str
    spec: str
    deadline_s: float
    engine: str = "local"
    machine: str = ""

    @property
    def key(self) -> str:
        return f"{self.rule} [{self.spec}] @{self.deadline_s:g}s on {self.engine} {self.machine}"

    @property
    def digest(self) -> str:
        text = "\0".join((self.workflow, self.rule, self.spec, self.engine, self.machine))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    @property
    def legacy_digest(self) -> str | None:
        """The file of a frontier written before engine and machine were in the key: read
        for the local engine only."""
        if self.engine != "local":
            return None
        text = "\0".join((self.workflow, self.rule, self.spec))
        return hashlib.sha256(text.encode()).hexdigest()[:16]


class StateDir:
    """The ``.expocloud`` directory of a workflow's working directory."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    # -- runs --------------------------------------------------------------------------------
    def new_run(self, run_id: str | None = None) -> Path:
        if run_id is None:
            stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
            run_id = f"{stamp}-{secrets.token_hex(2)}"
        run_dir = self.root / "runs" / run_id
        run_dir.mkdir(parents=True, exist_ok=False)
        return run_dir

    # -- frontiers ---------------------------------------------------------------------------
    def _frontier_path(self, ref: FamilyRef) -> Path:
        return self.root / "frontiers" / f"{ref.digest}.json"

    def has_frontiers(self) -> bool:
        """Whether an earlier run recorded a timeout here (one of this run's jobs may then be
        skipped on arrival)."""
        return any(not path.name.endswith(".model.json")  # a runtime model is no timeout
                   for path in (self.root / "frontiers").glob("*.json"))

    def load_frontier(self, ref: FamilyRef) -> Frontier:
        """Timeouts recorded with a deadline at least as long as ``ref``'s, on its engine and
        machine (plus, on the local engine, those of a frontier file older than that key)."""
        frontier = Frontier()
        paths = [self._frontier_path(ref)]
        if ref.legacy_digest is not None:
            paths.append(self.root / "frontiers" / f"{ref.legacy_digest}.json")
        for path in paths:
            self._load_into(frontier, _read_json(path, {}), ref)
        return frontier

    @staticmethod
    def _load_into(frontier: Frontier, data: object, ref: FamilyRef) -> None:
        for entry in data.get("timeouts", []) if isinstance(data, dict) else []:
            try:
                if float(entry["deadline_s"]) >= ref.deadline_s:
                    point = HardnessPoint(tuple(entry["scope"]), tuple(entry["vector"]))
                    frontier.add(point, str(entry["label"]))
            except (KeyError, TypeError, ValueError):
                continue

    def add_timeout(self, ref: FamilyRef, point: HardnessPoint, label: str, run_id: str) -> None:
        """Add a timeout to its frontier file: a read-modify-write under the file's lock, so
        two runs sharing this directory never lose each other's timeouts."""
        path = self._frontier_path(ref)
        with locked(path.with_name(f".{path.name}.lock")):
            data = _read_json(path, {})
            if not isinstance(data, dict):
                data = {}
            data.update({"v": 2, "workflow": ref.workflow, "rule": ref.rule, "spec": ref.spec,
                         "engine": ref.engine, "machine": ref.machine})
            data.setdefault("timeouts", []).append({
                "deadline_s": ref.deadline_s, "scope": list(point.scope),
                "vector": list(point.vector), "label": label, "run": run_id,
            })
            _write_json(path, data)

    # -- runtime models (coordinator/runtime_models.py) ---------------------------------------
    def _model_path(self, ref: FamilyRef) -> Path:
        return self.root / "frontiers" / f"{ref.digest}.model.json"

    def load_model(self, ref: FamilyRef) -> dict | None:
        """The family's saved runtime model, when one was saved with this deadline or a longer
        one (as a timeout holds: a model learned under a shorter deadline saw censored runs
        that a longer one would have finished)."""
        data = _read_json(self._model_path(ref), None)
        if not isinstance(data, dict) or not isinstance(data.get("model"), dict):
            return None
        try:
            return data["model"] if float(data["deadline_s"]) >= ref.deadline_s else None
        except (KeyError, TypeError, ValueError):
            return None

    def save_model(self, ref: FamilyRef, model: dict) -> None:
        """Keep the family's runtime model beside its frontier (``forget`` drops both)."""
        _write_json(self._model_path(ref), {
            "v": 1, "workflow": ref.workflow, "rule": ref.rule, "spec": ref.spec,
            "engine": ref.engine, "machine": ref.machine, "deadline_s": ref.deadline_s,
            "model": model})

    # -- placeholders ------------------------------------------------------------------------
    @property
    def _placeholders_path(self) -> Path:
        return self.root / "placeholders.json"

    def add_placeholders(self, contents: dict[str, bytes], rule: str, outcome: str,
                         run_id: str) -> None:
        """Remember placeholder outputs (path -> bytes written) so that forget can remove them."""
        data = _read_json(self._placeholders_path, {})
        if not isinstance(data, dict):
            data = {}
        for path, content in contents.items():
            data[path] = {"rule": rule, "outcome": outcome, "run": run_id,
                          "sha256": hashlib.sha256(content).hexdigest()}
        _write_json(self._placeholders_path, data)

    def forget(self, rule: str | None = None, workdir: Path | None = None) -> tuple[int, int]:
        """Drop stored frontiers and delete placeholder outputs (of one rule, or all).

        Returns (frontiers dropped, placeholder files deleted).
        """
        dropped = 0
        for path in sorted((self.root / "frontiers").glob("*.json")):
            data = _read_json(path, {})
            if rule is None or (isinstance(data, dict) and data.get("rule") == rule):
                path.unlink()  # a runtime model goes with its frontier, uncounted
                dropped += not path.name.endswith(".model.json")
        placeholders = _read_json(self._placeholders_path, {})
        if not isinstance(placeholders, dict):
            placeholders = {}
        deleted = 0
        kept = {}
        base = Path(workdir) if workdir else self.root.parent
        for path, info in placeholders.items():
            if rule is not None and info.get("rule") != rule:
                kept[path] = info
                continue
            target = base / path
            # Only a file still holding our placeholder: a real result written since stays.
            if target.is_file() and hashlib.sha256(target.read_bytes()).hexdigest() == info.get("sha256"):
                target.unlink()
                deleted += 1
        _write_json(self._placeholders_path, kept)
        return dropped, deleted
