"""Google's label rules as the executor checks them before any VM, held to agreement with the
fake Compute Engine's own copy (which answers Google's 400 for a label that breaks them)."""

from __future__ import annotations

import pytest

from expo_executor.emulator.api_error import ApiError
from expo_executor.emulator.compute_validation import _validate_labels
from expo_executor.gcp.labels import (MAX_LABELS, as_value, key_problem, labels_problem,
                                      parse_labels, value_problem)

GOOD = [("team", "ml"), ("a", ""), ("k_2-x", "0-9_z"), ("équipe", "données"), ("键", "值"),
        ("a" * 63, "b" * 63)]
BAD_KEYS = ["", "Team", "1team", "_team", "-t", "te.am", "te am", "a" * 64, "tEam"]
BAD_VALUES = ["ML", "a.b", "a b", "x" * 64, "a/b", "a=b"]


@pytest.mark.parametrize(("key", "value"), GOOD)
def test_valid_labels_pass_both_copies_of_the_rules(key: str, value: str) -> None:
    assert key_problem(key) is None and value_problem(key, value) is None
    _validate_labels({key: value}, "resource.labels")  # the fake takes it too


@pytest.mark.parametrize("key", BAD_KEYS)
def test_a_bad_key_is_refused_by_both(key: str) -> None:
    assert key_problem(key) is not None
    with pytest.raises(ApiError) as refused:
        _validate_labels({key: "v"}, "resource.labels")
    assert refused.value.code == 400
    assert str(refused.value.message).startswith(
        f"Invalid value for field 'resource.labels': ''. Label key '{key}' violates format "
        "constraints. The key must start with a lowercase character")


@pytest.mark.parametrize("value", BAD_VALUES)
def test_a_bad_value_is_refused_by_both(value: str) -> None:
    assert value_problem("k", value) is not None
    with pytest.raises(ApiError) as refused:
        _validate_labels({"k": value}, "resource.disks[0].initializeParams.labels")
    assert refused.value.message == (
        "Invalid value for field 'resource.disks[0].initializeParams.labels': ''. Label value "
        f"'{value}' violates format constraints. The value can only contain lowercase letters, "
        "numeric characters, underscores and dashes. The value can be at most 63 characters "
        "long. International characters are allowed.")


def test_at_most_64_labels_per_resource() -> None:
    many = {f"k{i}": "" for i in range(MAX_LABELS)}
    assert labels_problem(many) is None
    _validate_labels(many, "resource.labels")
    many["one-more"] = ""
    assert "more than the 64" in (labels_problem(many) or "")
    with pytest.raises(ApiError):
        _validate_labels(many, "resource.labels")


def test_parse_reads_pairs_and_bare_keys() -> None:
    assert parse_labels(" team=ml , project=x,flag ,") == {"team": "ml", "project": "x",
                                                            "flag": ""}
    assert parse_labels(None) == {} and parse_labels("") == {}


@pytest.mark.parametrize(("text", "words"), [
    ("Team=ml", "does not start with a lowercase letter"),
    ("team=M", "holds 'M'"),
    ("team=ml,team=cv", "given twice"),
    ("expocloud-run=x", "reserved"),
    ("=ml", "an empty label key"),
])
def test_parse_refuses_in_one_line(text: str, words: str) -> None:
    with pytest.raises(ValueError) as refused:
        parse_labels(text)
    assert words in str(refused.value) and "\n" not in str(refused.value)


def test_any_text_becomes_a_valid_value() -> None:
    assert as_value("group Align.Reads") == "group-align-reads"
    assert as_value("My Pipeline!") == "my-pipeline"
    long = as_value("x" * 100)
    assert len(long) == 63 and value_problem("k", long) is None
