"""The shipped engine profiles cannot lose a sweep's hardness: they are for --profile (which the
workflow's profiles/default joins), they keep going after a timeout, and both front ends read
them, with the `retries: 1` their comments invite as well."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from expo_executor.coordinator.profile_settings import read_profile
from expo_executor.frontends.cwl import runner

PROFILES = Path(__file__).resolve().parents[3] / "profiles"
ENGINE_PROFILES = ("gce-spot", "gce-hybrid", "gce-emulated")


@pytest.mark.parametrize("name", ENGINE_PROFILES)
def test_an_engine_profile_is_for_profile_and_keeps_going(name: str) -> None:
    text = (PROFILES / name / "config.yaml").read_text(encoding="utf-8")
    config = yaml.safe_load(text)
    assert config["keep-going"] is True
    assert config["jobs"] >= 1000
    assert "set-resources" not in config  # hardness is the workflow's, in its profiles/default
    assert "snakemake --profile" in text and "never --workflow-profile" in text


@pytest.mark.parametrize("name", ENGINE_PROFILES)
def test_both_front_ends_read_it_with_the_retries_it_invites(name: str, tmp_path: Path) -> None:
    text = (PROFILES / name / "config.yaml").read_text(encoding="utf-8")
    assert "# retries: 1" in text
    config = tmp_path / "config.yaml"
    config.write_text(text.replace("# retries: 1", "retries: 1"), encoding="utf-8")
    assert read_profile(config).settings["engine"] == "gce"
    defaults = runner.profile_defaults(str(config), runner.build_parser())
    assert defaults["expocloud_engine"] == "gce"


@pytest.mark.parametrize("threads", ["{a: 3, b: '2*x'}", "[a=3, b=2*x]"])
def test_a_profiles_set_threads_reach_the_doctor_as_threads(threads: str, tmp_path: Path) -> None:
    """``expocloud doctor`` checks the machines a profile's threads need (shapes.named_shapes):
    set-threads, in either of Snakemake's forms, join the rule's resources as ``_cores``; an
    expression is the run's to evaluate."""
    config = tmp_path / "config.yaml"
    config.write_text(f"set-threads: {threads}\nset-resources: {{a: {{mem_mb: 100}}}}\n",
                      encoding="utf-8")
    assert read_profile(config).resources == {"a": {"mem_mb": 100, "_cores": 3}}
