"""The SciSpot preemption model: how long Spot VMs live, and what preemptions cost a job.

After Kadupitiya, Jadhao & Sharma, "SciSpot" (sections 3.3-3.4 and 4.1.3). Preemptible VMs
with a fixed maximum lifetime are not memoryless: many die early, few in the middle, and the
rest shortly before the cap. Eq. 1 captures that "bathtub" with four parameters, eq. 2 turns
it into an expected lifetime, and eq. 3-10 into the expected time and cost of a job that has
to be recomputed when its VM goes away.

Units are HOURS throughout, as in the paper; callers convert. Lifetimes are fitted per
machine type from what our runs recorded (``expocloud fit-preemption``, ``preemption_fit``) and
stored in ``<state-dir>/preemption.json``; without data we fall back to illustrative priors.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Mapping

from expo_executor.core.errors import ExpoError

#: Exponents above this are clipped: e^700 is still finite, and any such F is far above 1.
_MAX_EXP = 700.0

MODELS_FILE = "preemption.json"


def _exp(x: float) -> float:
    """math.exp that saturates instead of raising OverflowError (F is clipped to 1 anyway)."""
    return math.exp(min(x, _MAX_EXP))


def require(ok: bool, setting: str, problem: str, fix: str) -> None:
    """A bad value is the caller's to fix: an ExpoError naming it (``preemption_fit`` too)."""
    if not ok:
        raise ExpoError(setting, problem, fix)


def positive(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value) and value > 0


@dataclass(frozen=True)
class Bathtub:
    """Eq. 1, F(t) = A(1 - e^{-t/tau1} + e^{(t-b)/tau2}), truncated at the lifetime cap.

    tau1: time constant of early preemptions (h); tau2: of the reclamation ramp before the cap
    (h); b: activation time of that ramp (h); A: scale. A VM cannot outlive ``cap_h`` (24 h for
    GCE preemptible VMs, or our own max_run_duration): whatever mass 1 - F(cap) is left reaches
    the cap and is not a preemption. Where A is large enough that F reaches 1 before the cap,
    F is clipped there and no VM survives past that point.
    """

    tau1: float
    tau2: float
    b: float
    A: float
    cap_h: float = 24.0

    def __post_init__(self) -> None:
        for name in ("tau1", "tau2", "b", "A", "cap_h"):
            value = getattr(self, name)
            require(positive(value), f"preemption model {name}",
                   f"{value!r} is not a positive number",
                   f"rerun `expocloud fit-preemption` or delete {MODELS_FILE}")

    # -- the distribution ------------------------------------------------------------------

    def _raw(self, t: float) -> float:
        """Eq. 1 unclipped: what the paper fits and what integrates in closed form."""
        return self.A * (1.0 - math.exp(-t / self.tau1) + _exp((t - self.b) / self.tau2))

    def _raw_pdf(self, t: float) -> float:
        return self.A * (math.exp(-t / self.tau1) / self.tau1
                         + _exp((t - self.b) / self.tau2) / self.tau2)

    @cached_property
    def t_end(self) -> float:
        """Where the lifetime distribution ends: the cap, or earlier where eq. 1 reaches 1."""
        if self._raw(self.cap_h) <= 1.0:
            return self.cap_h
        lo, hi = 0.0, self.cap_h
        if self._raw(lo) >= 1.0:
            return 0.0
        for _ in range(200):  # F is increasing: plain bisection, computed once per model
            mid = 0.5 * (lo + hi)
            if self._raw(mid) < 1.0:
                lo = mid
            else:
                hi = mid
            if hi - lo <= 1e-12 * self.cap_h:
                break
        return hi

    @cached_property
    def preempted_fraction(self) -> float:
        """F just before the cap: the share of VMs that are preempted rather than capped."""
        return min(1.0, max(0.0, self._raw(self.t_end)))

    def cdf(self, t_h: float) -> float:
        """P(lifetime <= t): eq. 1 clipped to [0, 1], and 1 at/after the cap (nothing outlives it)."""
        if t_h < 0.0:
            return 0.0
        if t_h >= self.cap_h:
            return 1.0
        return min(1.0, max(0.0, self._raw(t_h)))

    def pdf(self, t_h: float) -> float:
        """dF/dt = A(e^{-t/tau1}/tau1 + e^{(t-b)/tau2}/tau2) on [0, t_end), else 0.

        The paper prints the second term as ((t-b)/tau2) e^{(t-b)/tau2}: a typo, since
        d/dt e^{(t-b)/tau2} = (1/tau2) e^{(t-b)/tau2}. We use the correct derivative. The mass
        that reaches the cap is an atom there, not a density, so it is not in pdf().
        """
        if t_h < 0.0 or t_h >= self.t_end:
            return 0.0
        return self._raw_pdf(t_h)

    def expected_lifetime_h(self, include_survivors: bool = True) -> float:
        """E[L] in closed form; the paper's eq. 2 is ``include_survivors=False``.

        Eq. 2 is the integral of t f(t) over [0, T] with T = t_end (the cap, in the paper 24 h).
        Integrating by parts, that is T F(T) - integral of F over [0, T], and F integrates term
        by term: A(T - tau1(1 - e^{-T/tau1}) + tau2(e^{(T-b)/tau2} - e^{-b/tau2})). Eq. 2
        ignores the VMs still alive at the cap; they live exactly cap_h, so the proper
        expectation adds cap_h (1 - F(cap)). The two agree when F(cap) = 1 (e.g. the defaults).
        """
        T = self.t_end
        integral_f = self.A * (T - self.tau1 * (1.0 - math.exp(-T / self.tau1))
                               + self.tau2 * (_exp((T - self.b) / self.tau2)
                                              - math.exp(-self.b / self.tau2)))
        value = T * self._raw(T) - integral_f
        if include_survivors and T >= self.cap_h:
            value += self.cap_h * (1.0 - self.preempted_fraction)
        return value

    def sample(self, rng: random.Random) -> tuple[float, bool]:
        """One VM lifetime (h) by inverse CDF, and whether it was preempted (False: capped).

        Newton's method kept inside a bisection bracket: F is increasing, so the bracket always
        holds the root, and Newton makes it ~10 iterations instead of ~40 (>=10k samples/s).
        """
        u = rng.random()
        if u >= self.preempted_fraction:
            return self.cap_h, False
        if u <= self._raw(0.0):
            return 0.0, True
        lo, hi = 0.0, self.t_end
        t = 0.5 * (lo + hi)
        for _ in range(100):
            g = self._raw(t) - u
            if g > 0.0:
                hi = t
            else:
                lo = t
            slope = self._raw_pdf(t)
            step = g / slope if slope > 0.0 else math.inf
            t_new = t - step
            if not lo < t_new < hi:
                t_new = 0.5 * (lo + hi)
            if abs(t_new - t) <= 1e-10 * self.cap_h or hi - lo <= 1e-12 * self.cap_h:
                t = t_new
                break
            t = t_new
        return t, True

    def p_preempt_within(self, t_h: float, age_h: float = 0.0) -> float:
        """P(the VM ends in (age, age + t] | alive at age) = (F(age+t) - F(age)) / (1 - F(age)).

        Reaching the cap counts as an end: it kills the running jobs just as a preemption does.
        """
        require(t_h >= 0.0, "t_h", f"{t_h} is negative", "pass a duration >= 0 hours")
        require(age_h >= 0.0, "age_h", f"{age_h} is negative", "pass a VM age >= 0 hours")
        alive = 1.0 - self.cdf(age_h)
        if alive <= 0.0:
            return 1.0
        return min(1.0, max(0.0, (self.cdf(age_h + t_h) - self.cdf(age_h)) / alive))

    # -- persistence -----------------------------------------------------------------------

    def to_dict(self) -> dict[str, float]:
        return {"tau1": self.tau1, "tau2": self.tau2, "b": self.b, "A": self.A,
                "cap_h": self.cap_h}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Bathtub:
        missing = [k for k in ("tau1", "tau2", "b", "A") if k not in data]
        require(not missing, MODELS_FILE, f"a model lacks {', '.join(missing)}",
               "rerun `expocloud fit-preemption` or delete the file")
        return cls(tau1=data["tau1"], tau2=data["tau2"], b=data["b"], A=data["A"],
                   cap_h=data.get("cap_h", 24.0))


# -- the paper's job model (eq. 3-10) -------------------------------------------------------

def _check_job(t_h: float, lifetime_h: float | None, n: int) -> None:
    require(math.isfinite(t_h) and t_h >= 0.0, "t_h", f"{t_h} is not a duration",
           "pass the job's failure-free running time in hours (>= 0)")
    require(lifetime_h is None or positive(lifetime_h), "lifetime_h",
           f"{lifetime_h} is not a positive lifetime", "pass E[L] in hours (> 0)")
    require(isinstance(n, int) and not isinstance(n, bool) and n >= 1, "n",
           f"{n!r} is not a VM count", "pass an integer >= 1")


def _p_one(t_h: float, lifetime_h: float) -> float:
    """Eq. 9, P(i, t) = t / E[L], capped at 1: a job longer than E[L] is surely hit."""
    return min(1.0, t_h / lifetime_h)


def p_any_preempted(t_h: float, lifetime_h: float, n: int = 1) -> float:
    """Eq. 6-9: P(at least one of the job's n VMs is preempted) = 1 - (1 - t/E[L])^n."""
    _check_job(t_h, lifetime_h, n)
    return 1.0 - (1.0 - _p_one(t_h, lifetime_h)) ** n


def expected_time_h(t_h: float, lifetime_h: float, n: int = 1) -> float:
    """Eq. 4-5: E[T] = T + P(>= 1 preemption) T/2 (a preemption loses half the run on average)."""
    return t_h + p_any_preempted(t_h, lifetime_h, n) * t_h / 2.0


def expected_cost(t_h: float, price_per_h: float, lifetime_h: float, n: int = 1) -> float:
    """Eq. 3, E[C] = n c E[T]; equal to eq. 10, (1/2) n c T (3 - (1 - T/E[L])^n)."""
    require(math.isfinite(price_per_h) and price_per_h >= 0.0, "price_per_h",
           f"{price_per_h} is not a price", "pass the VM's price per hour (>= 0)")
    return n * price_per_h * expected_time_h(t_h, lifetime_h, n)


def expected_cost_per_job(t_h: float, price_per_h: float, jobs_per_vm: int,
                          lifetime_h: float | None, boot_h: float = 0.0) -> float:
    """Expected VM cost of one job when a VM runs ``jobs_per_vm`` jobs side by side.

    Our workers are the paper's n = 1 case run k = jobs_per_vm times over, back to back. Each
    of the k slots is busy for E[T] = t + p t/2 per job (eq. 4-5, p = min(1, t/E[L])): a
    preemption kills all k running jobs, and each loses on average half its run. Every
    preemption also buys a replacement VM that bills boot_h hours before it runs anything;
    a job sees its VM preempted with probability p, and the k jobs it killed share that boot.
    So cost/job = price (E[T] + p boot_h) / k. With k = 1 and boot_h = 0 this is eq. 3 with
    n = 1; with ``lifetime_h=None`` (on-demand, never preempted) it is price t / k.
    """
    require(isinstance(jobs_per_vm, int) and not isinstance(jobs_per_vm, bool)
           and jobs_per_vm >= 1, "jobs_per_vm", f"{jobs_per_vm!r} is not a job count",
           "pass an integer >= 1")
    require(math.isfinite(price_per_h) and price_per_h >= 0.0, "price_per_h",
           f"{price_per_h} is not a price", "pass the VM's price per hour (>= 0)")
    require(math.isfinite(boot_h) and boot_h >= 0.0, "boot_h", f"{boot_h} is not a duration",
           "pass the VM boot time in hours (>= 0)")
    _check_job(t_h, lifetime_h, 1)
    if lifetime_h is None:
        return price_per_h * t_h / jobs_per_vm
    p = _p_one(t_h, lifetime_h)
    return price_per_h * (expected_time_h(t_h, lifetime_h, 1) + p * boot_h) / jobs_per_vm


# -- defaults -------------------------------------------------------------------------------

_CUSTOM = re.compile(r"custom-(\d+)-\d+(?:-ext)?$")
_VCPUS = re.compile(r"-(\d+)$")


def vcpus(machine_type: str) -> int:
    """vCPUs from a GCE machine type name (n1-highcpu-32 -> 32; custom-8-16384 -> 8); else 2."""
    match = _CUSTOM.search(machine_type) or _VCPUS.search(machine_type)
    return int(match.group(1)) if match and int(match.group(1)) > 0 else 2


def default_model(machine_type: str, cap_h: float = 24.0) -> Bathtub:
    """An illustrative prior shaped like the paper's Fig. 1-2, NOT a measurement.

    Steep early preemptions, a flat middle and a sharp ramp before the cap; larger VMs are
    preempted more (Sec. 3.4): tau1 = 8 h / sqrt(vCPUs / 2) (8 h at 2 vCPUs, 2 h at 32), and
    the share of VMs exposed to early preemption, s = 0.15 + 0.05 log2(vCPUs) (0.2 at 2, 0.4 at
    32, at most 0.5). The ramp: tau2 = 0.5 h (scaled down for caps under 12 h), and b just below
    the cap at cap - tau2 ln(1/s - 1 + e^{-cap/tau1}), which is exactly what makes
    A = 1 / (1 - e^{-cap/tau1} + e^{(cap-b)/tau2}) (F(cap) = 1) come out as s. The ramp scales
    with the cap, so a 6 h cap still gives a bathtub. ``expocloud fit-preemption`` replaces
    these with fits to the lifetimes our runs recorded.
    """
    require(positive(cap_h), "cap_h", f"{cap_h!r} is not a positive duration",
           "pass the VMs' maximum lifetime in hours, e.g. 24")
    v = vcpus(machine_type)
    tau1 = min(12.0, max(0.5, 8.0 / math.sqrt(v / 2.0)))
    share = min(0.5, max(0.1, 0.15 + 0.05 * math.log2(v)))
    tau2 = 0.5 * min(1.0, cap_h / 12.0)
    early = 1.0 - math.exp(-cap_h / tau1)
    b = cap_h - tau2 * math.log(1.0 / share - 1.0 + math.exp(-cap_h / tau1))
    A = 1.0 / (early + math.exp((cap_h - b) / tau2))
    return Bathtub(tau1=tau1, tau2=tau2, b=b, A=A, cap_h=cap_h)
