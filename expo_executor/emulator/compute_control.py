"""The fake Compute Engine's control API over HTTP (``/_fake/...``), for a test or a tool in
another process: each route written once, as the ``FakeCompute`` method it calls.

``POST /_fake/fail_next`` takes every argument of ``FakeCompute.fail_next`` (``kind``,
``count``, ``zone``, ``op``, ``http_status``, ``quota_metric``, ``spot``, ``cause``);
``/_fake/project`` and ``/_fake/catalogue`` call one of the control methods ``STEERING`` lists,
as ``{"call": NAME, "args": [...], "kwargs": {...}}``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# The control calls of the project's APIs and of the catalogue that /_fake/ serves.
STEERING = {"project": frozenset({"disable", "enable", "deny", "deny_act_as",
                                  "remove_service_account", "set_caller", "bind", "unbind"}),
            "catalogue": frozenset({"set_quota", "add_nat", "remove_routers"})}
CONFIG = ("op_delay", "boot_delay", "list_delay")  # what POST /_fake/config may set


def _fail_next(fake: Any, body: dict) -> dict:
    fake.fail_next(body["kind"], int(body.get("count", 1)), body.get("zone"),
                   op=body.get("op"), http_status=body.get("http_status"),
                   quota_metric=body.get("quota_metric", "CPUS"), spot=body.get("spot"),
                   cause=body.get("cause", "stockout"))
    return {}


def _steer(what: str) -> Callable[[Any, dict], dict]:
    """``POST /_fake/project`` or ``/_fake/catalogue``: one of their control methods."""
    def steer(fake: Any, body: dict) -> dict:
        allowed = STEERING[what]
        if body["call"] not in allowed:
            raise ValueError(f"no control call {body['call']!r}; one of {sorted(allowed)}")
        target = fake.project if what == "project" else fake.catalogue
        getattr(target, body["call"])(*body.get("args", []), **body.get("kwargs", {}))
        return {}
    return steer


def _config(fake: Any, body: dict) -> dict:
    for name in CONFIG:
        if name in body:
            setattr(fake, name, float(body[name]))
    return {}


def _withhold(fake: Any, body: dict) -> dict:
    fake.withhold(body["zone"], *body["names"])
    return {}


def _chaos(fake: Any, body: dict) -> dict:
    fake.chaos(float(body["spot_mean_life_s"]), int(body.get("seed", 0)))
    return {}


CONTROL_ROUTES: dict[tuple[str, str], Callable[[Any, dict], Any]] = {
    ("GET", "instances"): lambda fake, _body: fake.instances(),
    ("GET", "requests"): lambda fake, _body: fake.requests,
    ("GET", "faults"): lambda fake, _body: fake.faults_served(),
    ("POST", "preempt"): lambda fake, body: {
        "preempted": fake.preempt(body["name"], body.get("action"), zone=body.get("zone"))},
    ("POST", "fail_next"): _fail_next,
    ("POST", "withhold"): _withhold,
    ("POST", "chaos"): _chaos,
    ("POST", "project"): _steer("project"),
    ("POST", "catalogue"): _steer("catalogue"),
    ("POST", "config"): _config,
}


def control(fake: Any, method: str, what: str, body: dict) -> tuple[int, Any]:
    """(status, JSON body) of ``method /_fake/what``: 404 for an unknown route or instance,
    400 for a bad argument."""
    call = CONTROL_ROUTES.get((method, what))
    if call is None:
        return 404, {"error": {"code": 404, "message": f"no control route {method} {what}"}}
    try:
        return 200, call(fake, body)
    except KeyError as err:
        return 404, {"error": {"code": 404, "message": str(err)}}
    except (ValueError, TypeError) as err:
        return 400, {"error": {"code": 400, "message": str(err)}}
