"""The bad-input table (tests/bad_input_cases.py) covers every category with distinct cases, and
the bucket-name check lets valid names through. Running each case against snakemake or
expocloud-cwl and a fake Compute server: tests/e2e/test_bad_input_runs.py.
"""

from __future__ import annotations

import pytest

from tests.bad_input_cases import CASES


def test_the_matrix_covers_every_category() -> None:
    counts: dict[str, int] = {}
    for case in CASES:
        counts[case.category] = counts.get(case.category, 0) + 1
    assert len(CASES) >= 35 and len({c.name for c in CASES}) == len(CASES)
    assert set(counts) == {"settings", "profile", "hardness", "cwl-hint", "credentials",
                           "bucket"}, counts
    assert all(n >= 4 for n in counts.values()), counts


@pytest.mark.parametrize("name", ["abc", "my-bucket_1", "a.b.c", "x" * 63,
                                  f"{'a' * 63}.{'b' * 63}", "expocloud-emulated"])
def test_valid_bucket_names_pass(name: str) -> None:
    from expo_executor.engines.gce.settings_checks import bucket_name_problem

    assert bucket_name_problem(name) is None
