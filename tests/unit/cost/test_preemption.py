"""The SciSpot preemption model: formulas against hand arithmetic, fitting, sampling, CLI."""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from pathlib import Path

import pytest

from expo_executor.core.errors import ExpoError
from expo_executor.cost.preemption import (
    Bathtub,
    default_model,
    expected_cost,
    expected_cost_per_job,
    expected_time_h,
    p_any_preempted,
    vcpus,
)
from expo_executor.cost.preemption_fit import (
    MIN_EVENTS,
    add_parser,
    fit,
    kaplan_meier,
    lifetimes,
    load_models,
    run,
)

# The paper-shaped model of the hand calculations: tau1 = 10, tau2 = 0.5, b = 23.5, cap 24, and
# A chosen so that F(24) = 1:
#   e^{-24/10} = e^{-2.4} = 0.0907180,  e^{(24-23.5)/0.5} = e^1 = 2.7182818
#   A = 1 / (1 - 0.0907180 + 2.7182818) = 1 / 3.6275638 = 0.2756671
A_FULL = 0.2756671
FULL = Bathtub(tau1=10.0, tau2=0.5, b=23.5, A=1 / (1 - math.exp(-2.4) + math.e))
# The same with A = 0.25: F(24) = 0.25 * 3.6275638 = 0.9068910, so 9.3% reach the cap.
PARTIAL = Bathtub(tau1=10.0, tau2=0.5, b=23.5, A=0.25)


def close(a: float, b: float, rel: float = 1e-5) -> bool:
    return math.isclose(a, b, rel_tol=rel, abs_tol=1e-9)


# -- eq. 1 and 2 ---------------------------------------------------------------------------

def test_cdf_by_hand() -> None:
    assert close(FULL.A, A_FULL)
    # F(1) = A (1 - e^{-0.1} + e^{(1-23.5)/0.5}) = A (1 - 0.9048374 + e^{-45} ~ 0)
    #      = 0.2756671 * 0.0951626 = 0.0262332
    assert close(FULL.cdf(1.0), 0.0262332)
    # F(23.9) = A (1 - e^{-2.39} + e^{0.8}) = A (1 - 0.0916298 + 2.2255409)
    #         = 0.2756671 * 3.1339111 = 0.8639163
    assert close(FULL.cdf(23.9), 0.8639163)
    # clipped: 0 before 0 and 1 at/after the cap, even where eq. 1 says less (PARTIAL)
    assert FULL.cdf(-1.0) == 0.0 and FULL.cdf(24.0) == 1.0 and PARTIAL.cdf(24.0) == 1.0
    assert close(PARTIAL.cdf(23.999999), 0.9068910)
    assert PARTIAL.cdf(30.0) == 1.0


def test_pdf_by_hand_uses_the_correct_derivative() -> None:
    # f(1) = A (e^{-0.1}/10 + e^{-45}/0.5) = 0.2756671 * 0.0904837 = 0.0249434
    assert close(FULL.pdf(1.0), 0.0249434)
    # f(23.5) = A (e^{-2.35}/10 + e^0/0.5) = 0.2756671 * (0.0095369 + 2) = 0.5539632; the
    # paper's printed ((t-b)/tau2) e^{...} would give A * 0.0095369 = 0.0026290 here.
    assert close(FULL.pdf(23.5), 0.5539632)
    assert FULL.pdf(-0.1) == 0.0 and FULL.pdf(24.0) == 0.0
    # pdf is dF/dt
    h = 1e-6
    for t in (0.5, 7.0, 23.0, 23.8):
        assert close(FULL.pdf(t), (FULL.cdf(t + h) - FULL.cdf(t - h)) / (2 * h), rel=1e-5)


def test_expected_lifetime_by_hand_and_by_quad() -> None:
    from scipy.integrate import quad

    # integral_0^24 F = A (24 - 10 (1 - e^{-2.4}) + 0.5 (e^1 - e^{-47}))
    #                 = A (24 - 9.0928205 + 1.3591409) = A * 16.2663204
    # E[L] = 24 F(24) - integral F = 24 - 0.2756671 * 16.2663204 = 24 - 4.4840893 = 19.5159107
    assert close(FULL.expected_lifetime_h(include_survivors=False), 19.5159107)
    assert close(FULL.expected_lifetime_h(), 19.5159107)  # F(24) = 1: nobody survives
    quad_full, _ = quad(lambda t: t * FULL.pdf(t), 0, 24, points=[23.5], limit=200)
    assert close(FULL.expected_lifetime_h(False), quad_full, rel=1e-7)

    # PARTIAL, eq. 2: 24 * 0.9068910 - 0.25 * 16.2663204 = 21.7653832 - 4.0665801 = 17.6988031
    assert close(PARTIAL.expected_lifetime_h(include_survivors=False), 17.6988031)
    # with the 1 - 0.9068910 = 0.0931090 that live exactly 24 h: + 2.2346168 = 19.9334199
    assert close(PARTIAL.expected_lifetime_h(), 19.9334199)
    quad_partial, _ = quad(lambda t: t * PARTIAL.pdf(t), 0, 24, points=[23.5], limit=200)
    assert close(PARTIAL.expected_lifetime_h(False), quad_partial, rel=1e-7)


def test_a_too_large_clips_before_the_cap() -> None:
    m = Bathtub(tau1=10.0, tau2=0.5, b=23.5, A=0.3)  # eq. 1 reaches 1 before 24 h
    assert m.t_end < 24.0 and close(m._raw(m.t_end), 1.0, rel=1e-9)
    assert m.cdf(m.t_end + 0.01) == 1.0 and m.pdf(m.t_end + 0.01) == 0.0
    from scipy.integrate import quad
    value, _ = quad(lambda t: t * m.pdf(t), 0, m.t_end, points=[23.5], limit=200)
    assert close(m.expected_lifetime_h(), value, rel=1e-7)


def test_p_preempt_within() -> None:
    assert close(FULL.p_preempt_within(1.0), FULL.cdf(1.0))
    # alive at 23.5 h, dies within 0.4 h: (F(23.9) - F(23.5)) / (1 - F(23.5))
    # F(23.5) = A (1 - e^{-2.35} + 1) = 0.2756671 * 1.9046311 = 0.5250442
    # (0.8639163 - 0.5250442) / (1 - 0.5250442) = 0.3388721 / 0.4749558 = 0.7134796
    assert close(FULL.p_preempt_within(0.4, age_h=23.5), 0.7134796, rel=1e-5)
    assert FULL.p_preempt_within(1.0, age_h=23.5) == 1.0  # the cap ends it
    assert FULL.p_preempt_within(0.0, age_h=5.0) == 0.0
    with pytest.raises(ExpoError):
        FULL.p_preempt_within(-1.0)


def test_dict_round_trip_and_bad_parameters() -> None:
    assert Bathtub.from_dict(PARTIAL.to_dict()) == PARTIAL
    with pytest.raises(ExpoError, match="tau1"):
        Bathtub(tau1=0.0, tau2=0.5, b=23.5, A=0.3)
    with pytest.raises(ExpoError, match="lacks tau2"):
        Bathtub.from_dict({"tau1": 1.0, "b": 2.0, "A": 0.5})


# -- the job model, eq. 3-10 -----------------------------------------------------------------

def test_job_model_by_hand() -> None:
    # T = 2 h, E[L] = 8 h, n = 3: P = 1 - (1 - 2/8)^3 = 1 - 0.421875 = 0.578125
    assert close(p_any_preempted(2.0, 8.0, 3), 0.578125)
    # E[T] = 2 + 0.578125 * 2/2 = 2.578125; E[C] = 3 * 1.5 $/h * 2.578125 h = 11.6015625
    assert close(expected_time_h(2.0, 8.0, 3), 2.578125)
    assert close(expected_cost(2.0, 1.5, 8.0, 3), 11.6015625)
    # T / E[L] is capped at 1: a job longer than E[L] is surely preempted once
    assert p_any_preempted(10.0, 8.0, 2) == 1.0
    assert close(expected_time_h(10.0, 8.0), 15.0)


@pytest.mark.parametrize("t, c, lifetime, n", [(2.0, 1.5, 8.0, 3), (0.5, 0.02, 19.5, 1),
                                                (3.0, 0.7, 12.0, 8), (0.0, 1.0, 5.0, 2)])
def test_eq_10_equals_eq_3_with_eq_4_to_8(t: float, c: float, lifetime: float, n: int) -> None:
    eq10 = 0.5 * n * c * t * (3 - (1 - t / lifetime) ** n)
    assert close(expected_cost(t, c, lifetime, n), eq10, rel=1e-12)


def test_expected_cost_per_job() -> None:
    # k = 1, boot 0 -> eq. 3 with n = 1
    for t, c, lifetime in ((2.0, 1.5, 8.0), (0.3, 0.04, FULL.expected_lifetime_h())):
        assert close(expected_cost_per_job(t, c, 1, lifetime), expected_cost(t, c, lifetime, 1),
                     rel=1e-12)
    # on-demand: price t / k
    assert close(expected_cost_per_job(2.0, 1.5, 4, None), 0.75)
    # T = 2, E[L] = 8 -> p = 0.25, E[T] = 2.25; boot 0.1 h, k = 4, $1.5/h:
    # 1.5 * (2.25 + 0.25 * 0.1) / 4 = 1.5 * 2.275 / 4 = 0.853125
    assert close(expected_cost_per_job(2.0, 1.5, 4, 8.0, boot_h=0.1), 0.853125)
    with pytest.raises(ExpoError, match="jobs_per_vm"):
        expected_cost_per_job(2.0, 1.5, 0, 8.0)
    with pytest.raises(ExpoError, match="lifetime_h"):
        expected_cost_per_job(2.0, 1.5, 1, 0.0)


# -- defaults --------------------------------------------------------------------------------

def test_default_model_shape() -> None:
    assert [vcpus(m) for m in ("n1-highcpu-32", "e2-micro", "custom-8-16384", "e2-standard-4")] \
        == [32, 2, 8, 4]
    for cap in (24.0, 6.0):
        lives = []
        for mt in ("n1-highcpu-2", "n1-highcpu-8", "n1-highcpu-32"):
            m = default_model(mt, cap)
            assert close(m._raw(cap), 1.0, rel=1e-9) and m.b < cap
            # bathtub: early hazard > middle hazard < late hazard
            hazard = [m.pdf(t) / (1 - m.cdf(t)) for t in (0.0, 0.5 * cap, cap - 0.1)]
            assert hazard[0] > hazard[1] < hazard[2]
            assert hazard[2] > 5 * hazard[0]
            lives.append(m.expected_lifetime_h())
        assert lives[0] > lives[1] > lives[2]  # larger VMs are preempted more


# -- fitting ---------------------------------------------------------------------------------

def test_kaplan_meier_by_hand() -> None:
    # times 1 (event), 2 (censored), 3 (event), 3 (censored), 4 (event)
    # S(1) = 1 - 1/5 = 0.8; at 3: at risk 3 -> S = 0.8 * 2/3 = 0.5333; at 4: 1 left -> S = 0
    curve = kaplan_meier([3, 1, 4, 2, 3], [True, True, True, False, False])
    assert [t for t, _ in curve] == [1, 3, 4]
    assert close(curve[0][1], 0.2) and close(curve[1][1], 1 - 0.8 * 2 / 3) and curve[2][1] == 1.0
    with pytest.raises(ExpoError):
        kaplan_meier([1.0], [True, False])


TRUE = Bathtub(tau1=4.0, tau2=0.5, b=23.6, A=0.3)  # F(24) = 0.967: 3.3% reach the cap


def _observations(seed: int, n: int, censor: float) -> tuple[list[float], list[bool]]:
    """Lifetimes from TRUE; a ``censor`` share also get an independent uniform deletion time."""
    rng = random.Random(seed)
    times, flags = [], []
    for _ in range(n):
        t, preempted = TRUE.sample(rng)
        if rng.random() < censor:
            deleted = rng.uniform(0.0, TRUE.cap_h)
            if deleted < t:
                t, preempted = deleted, False
        times.append(t)
        flags.append(preempted)
    return times, flags


@pytest.mark.parametrize("censor", [0.0, 0.35])
def test_fit_recovers_known_parameters(censor: float) -> None:
    times, flags = _observations(seed=7, n=4000, censor=censor)
    censored = 1 - sum(flags) / len(flags)
    assert (censor == 0.0 and censored < 0.05) or 0.25 < censored < 0.35
    m = fit(times, flags)
    assert abs(m.tau1 / TRUE.tau1 - 1) < 0.15  # within 15%
    assert abs(m.tau2 / TRUE.tau2 - 1) < 0.15
    assert abs(m.b - TRUE.b) < 0.2  # hours
    assert abs(m.A / TRUE.A - 1) < 0.10
    assert abs(m.expected_lifetime_h() / TRUE.expected_lifetime_h() - 1) < 0.05


def test_fit_with_too_few_preemptions_is_the_default() -> None:
    times = [1.0, 2.0, 3.0, 4.0, 10.0, 24.0, 24.0]
    flags = [True] * (MIN_EVENTS - 1) + [False, False, False]
    assert fit(times, flags, 24.0, "n1-highcpu-8") == default_model("n1-highcpu-8", 24.0)


# -- sampling --------------------------------------------------------------------------------

@pytest.mark.parametrize("model", [PARTIAL, FULL, default_model("n1-highcpu-32", 6.0)])
def test_samples_follow_the_cdf(model: Bathtub) -> None:
    rng = random.Random(42)
    samples = [model.sample(rng) for _ in range(20_000)]
    times = sorted(t for t, _ in samples)
    assert max(times) <= model.cap_h and min(times) >= 0.0
    # capped (not preempted) exactly when it reached the cap
    assert all((t == model.cap_h) == (not p) for t, p in samples)
    survivors = sum(not p for _, p in samples) / len(samples)
    assert abs(survivors - (1 - model.preempted_fraction)) < 0.01
    # Kolmogorov-Smirnov distance, with the atom at the cap: compare both sides of each step
    n, d, i = len(times), 0.0, 0
    while i < n:
        j = i
        while j < n and times[j] == times[i]:
            j += 1
        x = times[i]
        d = max(d, abs(j / n - model.cdf(x)), abs(i / n - model.cdf(x - 1e-12)))
        i = j
    assert d < 0.02


def test_sampling_stays_in_the_models_support() -> None:
    """Every draw is a lifetime in [0, cap], and one not preempted is capped. (How fast
    sampling is belongs in a benchmark: this test once timed 10,000 draws, and failed on a
    loaded machine.)"""
    rng = random.Random(0)
    for _ in range(10_000):
        hours, preempted = PARTIAL.sample(rng)
        assert 0 <= hours <= PARTIAL.cap_h
        assert preempted or hours == PARTIAL.cap_h


# -- recorded lifetimes and `expocloud fit-preemption` ---------------------------------------

def _write_run(state: Path, run_id: str, records: list[dict]) -> None:
    run_dir = state / "runs" / run_id
    run_dir.mkdir(parents=True)
    lines = [json.dumps(r) for r in records]
    (run_dir / "vms.jsonl").write_text("\n".join(lines) + "\n{\"torn\n")


def _vm(name: str, hours: float, end: str, pool: str = "spot",
        machine_type: str | None = "n1-highcpu-8") -> dict:
    rec = {"name": name, "pool": pool, "created": 1000.0, "ended": 1000.0 + hours * 3600,
           "end": end}
    if machine_type:
        rec["machine_type"] = machine_type
    return rec


@pytest.fixture
def state(tmp_path: Path) -> Path:
    rng = random.Random(3)
    truth = default_model("n1-highcpu-8")
    spot = []
    for i in range(300):
        t, preempted = truth.sample(rng)
        spot.append(_vm(f"a{i}", t, "preempted" if preempted else "capped"))
    _write_run(tmp_path, "r1", spot[:150] + [
        _vm("od", 5.0, "deleted", pool="on_demand"),
        _vm("loc", 5.0, "deleted", pool="local"),
        _vm("nc", 0.0, "not created"),
        _vm("old", 1.0, "preempted", machine_type=None),
    ])
    _write_run(tmp_path, "r2", spot[150:] + [
        _vm("lost", 2.5, "lost"),
        _vm("s1", 1.0, "preempted", machine_type="e2-standard-2"),
        _vm("s2", 3.0, "deleted", machine_type="e2-standard-2"),
    ])
    return tmp_path


def test_lifetimes_from_vms_jsonl(state: Path) -> None:
    data = lifetimes(state)
    assert set(data) == {"n1-highcpu-8", "e2-standard-2"}
    times, flags = data["n1-highcpu-8"]
    assert len(times) == 301  # 300 sampled + lost; on-demand, local, not created, old: skipped
    assert flags[[round(t, 9) for t in times].index(2.5)] is False  # lost: censored
    assert data["e2-standard-2"] == ([1.0, 3.0], [True, False])


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="expocloud")
    add_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(argv)


def test_fit_preemption_command(state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(_parse(["fit-preemption", "--state-dir", str(state), "--dry-run"])) == 0
    assert not (state / "preemption.json").exists()
    assert load_models(state).source("n1-highcpu-8") == "default prior"

    assert run(_parse(["fit-preemption", "--state-dir", str(state)])) == 0
    out = capsys.readouterr().out.splitlines()
    assert any(line.startswith("n1-highcpu-8: 301 VMs") and "default prior" not in line
               for line in out)
    assert any(line.startswith("e2-standard-2: 2 VMs, 1 preemptions") and
               f"default prior (1 < MIN_EVENTS={MIN_EVENTS} preemptions)" in line for line in out)

    stored = json.loads((state / "preemption.json").read_text())
    entry = stored["n1-highcpu-8"]
    assert entry["fitted"] is True and entry["vms"] == 301
    models = load_models(state)
    assert models.for_type("n1-highcpu-8") == Bathtub.from_dict(entry)
    assert models.source("n1-highcpu-8") == \
        f"fitted on 301 VMs ({entry['preemptions']} preemptions)"
    assert models.for_type("e2-standard-2") == default_model("e2-standard-2")
    assert models.source("e2-standard-2") == "default prior"
    assert models.for_type("c2-standard-60") == default_model("c2-standard-60")
    # 300 VMs from the n1-highcpu-8 prior: the fit lands near it
    prior = default_model("n1-highcpu-8").expected_lifetime_h()
    assert abs(models.for_type("n1-highcpu-8").expected_lifetime_h() / prior - 1) < 0.1


def test_bad_models_file_is_one_line_error(tmp_path: Path) -> None:
    (tmp_path / "preemption.json").write_text("{not json")
    with pytest.raises(ExpoError, match="preemption.json") as info:
        load_models(tmp_path)
    assert "\n" not in str(info.value)


def test_bad_cap_hours(tmp_path: Path) -> None:
    with pytest.raises(ExpoError, match="--cap-hours"):
        run(_parse(["fit-preemption", "--state-dir", str(tmp_path), "--cap-hours", "0"]))
