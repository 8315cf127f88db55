"""Hardness specs, points, the partial order, the frontier and durations."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from expo_executor.core.errors import ExpoError
from expo_executor.core.hardness import (
    Dimension,
    Frontier,
    HardnessPoint,
    HardnessSpec,
    parse_duration,
)

SPEC = "variant:heuristic<bnb<brute, n_tasks, n_agents; scope: dataset"


def assert_one_line_error(excinfo: pytest.ExceptionInfo, *fragments: str) -> str:
    """The message is one line, carries a fix and names the problem (each fragment)."""
    message = str(excinfo.value)
    assert len(message.splitlines()) == 1, message
    assert "\n" not in message and "\r" not in message, message
    assert "fix:" in message, message
    for fragment in fragments:
        assert fragment in message, (fragment, message)
    return message


# -- parsing ---------------------------------------------------------------------------------
@pytest.mark.parametrize("text", [
    SPEC,
    "n",
    "n_tasks, n_agents",
    "variant:heuristic<bnb<brute",
    "a:x<y, b; scope: c, d",
])
def test_canonical_specs_round_trip(text):
    spec = HardnessSpec.parse(text)
    assert spec.text == text
    assert HardnessSpec.parse(spec.text) == spec


def test_parse_reads_the_documented_example():
    spec = HardnessSpec.parse(SPEC)
    assert spec.dimensions == (
        Dimension("variant", ("heuristic", "bnb", "brute")),
        Dimension("n_tasks"),
        Dimension("n_agents"),
    )
    assert spec.scope == ("dataset",)
    assert spec.names == ("variant", "n_tasks", "n_agents", "dataset")


@pytest.mark.parametrize("text, canonical", [
    ("  variant : heuristic < bnb<brute ,n_tasks;scope:dataset ",
     "variant:heuristic<bnb<brute, n_tasks; scope: dataset"),
    ("a, b; scope = c", "a, b; scope: c"),
    ("a;", "a"),
    ("a; ", "a"),
])
def test_loose_spellings_print_canonically(text, canonical):
    spec = HardnessSpec.parse(text)
    assert spec.text == canonical
    assert HardnessSpec.parse(canonical) == spec


_IDENT = st.from_regex(r"\A[A-Za-z_][A-Za-z0-9_]{0,6}\Z")
_VALUE = st.text(st.characters(whitelist_categories=("L", "N"), whitelist_characters="-_.+"),
                 min_size=1, max_size=5)


@st.composite
def specs(draw) -> HardnessSpec:
    names = draw(st.lists(_IDENT, min_size=1, max_size=6, unique=True))
    n_scope = draw(st.integers(0, len(names) - 1))
    dims = []
    for name in names[: len(names) - n_scope]:
        if draw(st.booleans()):
            dims.append(Dimension(name))
        else:
            order = draw(st.lists(_VALUE, min_size=1, max_size=4, unique=True))
            dims.append(Dimension(name, tuple(order)))
    return HardnessSpec(tuple(dims), tuple(names[len(names) - n_scope:]))


@settings(max_examples=150, deadline=None)
@given(specs())
def test_any_valid_spec_round_trips_through_text(spec):
    parsed = HardnessSpec.parse(spec.text)
    assert parsed == spec
    assert parsed.text == spec.text


@pytest.mark.parametrize("text, fragments", [
    ("", ["empty"]),
    ("   ", ["empty"]),
    (None, ["empty or not a string"]),
    (42, ["not a string"]),
    ("n tasks", ["'n tasks'", "not a wildcard name"]),
    ("a:", ["'a'", "empty or repeated value"]),
    ("a:x<x", ["'a'", "empty or repeated value"]),
    ("a:x<<y", ["'a'", "empty or repeated value"]),
    ("a, b, a", ["'a'", "twice"]),
    ("a; scope: a", ["'a'", "twice"]),
    ("a; scope: b, b", ["'b'", "twice"]),
    ("a; b", ["'b'", "after ';'"]),
    ("a; scopes: b", ["after ';'"]),
    ("a; scope b", ["after ';'"]),
    ("a; scope: b c", ["'b c'", "not a wildcard name"]),
    ("a, , b", ["wildcard name"]),
    ("a,", ["wildcard name"]),
    ("; scope: d", ["wildcard name"]),
    ("a; scope:", ["wildcard name"]),
    ("1st", ["'1st'", "not a wildcard name"]),
])
def test_bad_specs_raise_one_line_errors_with_a_fix(text, fragments):
    with pytest.raises(ExpoError) as excinfo:
        HardnessSpec.parse(text, setting="set-resources.solve.hardness")
    message = assert_one_line_error(excinfo, *fragments)
    assert message.startswith("set-resources.solve.hardness: ")
    assert excinfo.value.setting == "set-resources.solve.hardness"


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from("ab_1 :<;,=\n\tscope"), max_size=30))
def test_any_text_parses_canonically_or_raises_a_one_line_error(text):
    try:
        spec = HardnessSpec.parse(text)
    except ExpoError as error:
        message = str(error)
        assert len(message.splitlines()) == 1 and "\n" not in message, message
        assert "fix:" in message
    else:
        assert HardnessSpec.parse(spec.text) == spec


def test_line_breaks_in_a_spec_keep_the_error_on_one_line():
    # A YAML block scalar with a forgotten comma puts a line break inside a name.
    for text in ["variant:heuristic<bnb<brute, n_tasks\nn_agents", "a:x<\nx", "a;\nscope\nb"]:
        with pytest.raises(ExpoError) as excinfo:
            HardnessSpec.parse(text)
        assert_one_line_error(excinfo)


# -- points and the partial order ------------------------------------------------------------
def test_categorical_values_compare_by_declared_order_not_alphabetically():
    spec = HardnessSpec.parse("variant:heuristic<bnb<brute")
    heuristic, bnb, brute = (spec.point({"variant": v}) for v in ("heuristic", "bnb", "brute"))
    # Alphabetically bnb < brute < heuristic: the declared order must win.
    assert heuristic.as_easy_as(bnb) and bnb.as_easy_as(brute) and heuristic.as_easy_as(brute)
    assert not bnb.as_easy_as(heuristic)
    assert not brute.as_easy_as(bnb)
    assert heuristic.sort_key() < bnb.sort_key() < brute.sort_key()


def test_numeric_values_compare_as_numbers():
    spec = HardnessSpec.parse("n")
    nine, ten, hundred = (spec.point({"n": v}) for v in ("9", "10", "100"))
    assert nine.as_easy_as(ten) and not ten.as_easy_as(nine)
    assert ten.as_easy_as(hundred) and not hundred.as_easy_as(nine)
    assert nine.sort_key() < ten.sort_key() < hundred.sort_key()
    assert spec.point({"n": "2.5"}).vector == (2.5,)
    assert spec.point({"n": "-3"}).vector == (-3.0,)
    assert spec.point({"n": 7}).vector == (7.0,)  # snakemake may hand over non-strings


def test_point_uses_the_scope_and_ignores_other_wildcards():
    spec = HardnessSpec.parse(SPEC)
    point = spec.point({"variant": "bnb", "n_tasks": "10", "n_agents": "3",
                        "dataset": "d1", "seed": "7"})
    assert point == HardnessPoint(("d1",), (1.0, 10.0, 3.0))
    other = spec.point({"variant": "bnb", "n_tasks": "10", "n_agents": "3", "dataset": "d2"})
    assert not point.as_easy_as(other) and not other.as_easy_as(point)


def test_describe_shows_every_named_wildcard():
    spec = HardnessSpec.parse(SPEC)
    text = spec.describe({"variant": "bnb", "n_tasks": "9", "n_agents": "9", "dataset": "d"})
    assert text == "{variant=bnb, n_tasks=9, n_agents=9, dataset=d}"


def test_unknown_wildcard_names_the_wildcard_and_the_rules_own():
    spec = HardnessSpec.parse(SPEC)
    with pytest.raises(ExpoError) as excinfo:
        spec.point({"variant": "bnb", "n_tasks": "1", "dataset": "d"}, setting="solve.hardness")
    assert_one_line_error(excinfo, "'n_agents'", "unknown wildcard", "dataset, n_tasks, variant")
    with pytest.raises(ExpoError) as excinfo:
        spec.check_wildcards([], "solve.hardness")
    assert_one_line_error(excinfo, "unknown wildcard", "none")


def test_non_numeric_value_without_declared_order():
    spec = HardnessSpec.parse("n_tasks")
    with pytest.raises(ExpoError) as excinfo:
        spec.point({"n_tasks": "many"})
    assert_one_line_error(excinfo, "'n_tasks'", "'many'", "declare")


def test_value_missing_from_declared_order():
    spec = HardnessSpec.parse("variant:heuristic<bnb<brute")
    with pytest.raises(ExpoError) as excinfo:
        spec.point({"variant": "greedy"})
    assert_one_line_error(excinfo, "'greedy'", "'variant'", "missing", "heuristic<bnb<brute")
    with pytest.raises(ExpoError):  # exact match only: no case folding, no trimming
        spec.point({"variant": "BnB"})


@pytest.mark.parametrize("value", ["nan", "NaN", "-nan", "+nan", " nan ", "inf", "-inf",
                                   "Infinity", "1e999", "-1e999"])
def test_nan_like_and_infinite_values_are_rejected(value):
    # An infinite coordinate is no better than NaN: (inf, -inf) sums to NaN and breaks the
    # easiest-first heap order, so the only numbers accepted are finite ones.
    spec = HardnessSpec.parse("n, m")
    with pytest.raises(ExpoError) as excinfo:
        spec.point({"n": value, "m": "1"})
    assert_one_line_error(excinfo, "'n'", value)


def test_value_with_a_line_break_keeps_the_error_on_one_line():
    spec = HardnessSpec.parse("n, v:a<b")
    for wildcards in ({"n": "1\n2", "v": "a"}, {"n": "1", "v": "c\nd"}):
        with pytest.raises(ExpoError) as excinfo:
            spec.point(wildcards)
        assert_one_line_error(excinfo)


_COORD = st.integers(-3, 3).map(float)


def _points(dims: int):
    return st.builds(HardnessPoint, st.sampled_from([("A",), ("B",)]),
                     st.tuples(*[_COORD] * dims))


def _leq(a: HardnessPoint, b: HardnessPoint) -> bool:
    return a.scope == b.scope and all(x <= y for x, y in zip(a.vector, b.vector, strict=True))


@settings(max_examples=200, deadline=None)
@given(_points(3), _points(3), _points(3))
def test_as_easy_as_is_a_partial_order_and_sort_key_extends_it(a, b, c):
    assert a.as_easy_as(a)
    assert a.as_easy_as(b) == _leq(a, b)
    if a.as_easy_as(b) and b.as_easy_as(a):
        assert a == b
    if a.as_easy_as(b) and b.as_easy_as(c):
        assert a.as_easy_as(c)
    if a.as_easy_as(b) and a != b:
        assert a.sort_key() < b.sort_key()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(-1e300, 1e300), st.floats(-1e300, 1e300),
                          st.floats(-1e300, 1e300)), min_size=2, max_size=2))
def test_sort_key_extends_the_order_even_with_huge_coordinates(vectors):
    a, b = (HardnessPoint((), v) for v in vectors)
    lo = HardnessPoint((), tuple(map(min, a.vector, b.vector)))
    for high in (a, b):
        if lo != high:
            assert lo.sort_key() < high.sort_key()


def test_points_of_different_scopes_or_lengths_are_incomparable():
    a = HardnessPoint(("A",), (0.0, 0.0))
    assert not a.as_easy_as(HardnessPoint(("B",), (1.0, 1.0)))
    assert not a.as_easy_as(HardnessPoint(("A",), (1.0, 1.0, 1.0)))


# -- the frontier ----------------------------------------------------------------------------
@settings(max_examples=200, deadline=None)
@given(st.lists(_points(2), max_size=25))
def test_frontier_is_the_antichain_of_minimal_timeouts(points):
    frontier = Frontier()
    for i, point in enumerate(points):
        covered = any(_leq(q, point) for q in points[:i])
        assert frontier.add(point, f"t{i}") is (not covered)
        entries = [e.point for e in frontier.points]
        for x in entries:
            for y in entries:
                assert x is y or not _leq(x, y), (x, y)
        seen = points[: i + 1]
        minimal = {p for p in seen if not any(_leq(q, p) and q != p for q in seen)}
        assert set(entries) == minimal and len(entries) == len(minimal)
    for point in points:
        dominator = frontier.dominator(point)
        assert dominator is not None and _leq(dominator.point, point)


def test_frontier_keeps_the_label_and_replaces_harder_points():
    frontier = Frontier()
    hard = HardnessPoint((), (2.0, 2.0))
    easy = HardnessPoint((), (1.0, 1.0))
    side = HardnessPoint((), (0.0, 5.0))
    assert frontier.add(hard, "hard") and frontier.add(side, "side")
    assert frontier.add(easy, "easy")
    assert {e.label for e in frontier.points} == {"easy", "side"}
    assert not frontier.add(hard, "hard again")
    assert frontier.dominator(HardnessPoint((), (3.0, 1.0))).label == "easy"
    assert frontier.dominator(HardnessPoint((), (0.0, 0.0))) is None


# -- durations -------------------------------------------------------------------------------
@pytest.mark.parametrize("value, seconds", [
    ("90s", 90.0), ("5m", 300.0), ("1h", 3600.0), ("1h30m", 5400.0), ("1h 30m", 5400.0),
    (7, 7.0), (2.5, 2.5), ("2.5", 2.5), ("1d", 86400.0), ("500ms", 0.5), (" 5M ", 300.0),
    ("1m30s", 90.0),
])
def test_parse_duration_reads_seconds(value, seconds):
    result = parse_duration(value, "deadline")
    assert isinstance(result, float)
    assert result == pytest.approx(seconds)


@pytest.mark.parametrize("value", [
    "-5s", "0", "0s", 0, -1, "abc", "5 parsecs", "5 days", True, False, None, "inf", "nan",
    float("inf"), float("nan"), "", "s", "1h30", "5s5", [5], "1e999",
    pytest.param(10 ** 400, id="10**400"),
])
def test_parse_duration_rejects_non_durations(value):
    with pytest.raises(ExpoError) as excinfo:
        parse_duration(value, "deadline")
    message = assert_one_line_error(excinfo)
    assert message.startswith("deadline: ")


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.integers(), st.floats(), st.text(max_size=12), st.booleans(), st.none()))
def test_parse_duration_returns_a_positive_finite_float_or_raises_expo_error(value):
    try:
        seconds = parse_duration(value, "deadline")
    except ExpoError as error:
        assert "fix:" in str(error) and "\n" not in str(error)
    else:
        assert isinstance(seconds, float) and math.isfinite(seconds) and seconds > 0
