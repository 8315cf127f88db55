"""A CWL tool's hints (frontends/cwl/hints.py): expo:Labels (its labels and name for its VMs,
or one line naming the hint, as the tool loads) and expo:Hardness's noise inputs (read with
the hint, checked against the tool's inputs like its dimensions and scope)."""

from __future__ import annotations

import pytest

from expo_executor.core.errors import ExpoError
from expo_executor.frontends.cwl.hints import HARDNESS, LABELS, labels, read_sweep


def test_a_tools_labels_carry_its_name_and_no_hint_is_no_labels() -> None:
    hints = [{"class": LABELS, "labels": "team=ml, project=x"}]
    assert labels("align.cwl", hints) == (("expocloud-rule", "align-cwl"), ("project", "x"),
                                          ("team", "ml"))
    assert labels("align.cwl", []) == ()
    assert labels("align.cwl", [{"class": LABELS, "labels": ""}]) == ()


def test_a_label_google_refuses_names_the_hint() -> None:
    with pytest.raises(ExpoError) as refused:
        labels("align.cwl", [{"class": LABELS, "labels": "team=ML"}])
    assert str(refused.value).startswith("hint expo:Labels of align.cwl: not a valid label")


def test_a_tools_labels_with_the_runs_stay_within_what_gce_leaves_the_user() -> None:
    """As a Snakemake rule's gce_labels: the run's --expocloud-gce-labels are on the tool's
    VMs too, and with the executor's own they may not pass GCE's 64 per resource."""
    run = {f"run{i}": "x" for i in range(50)}
    seven = [{"class": LABELS, "labels": ",".join(f"tool{i}=y" for i in range(7))}]
    assert len(labels("align.cwl", seven, run)) == 8  # 57 the user's: the limit, not past it
    eight = [{"class": LABELS, "labels": ",".join(f"tool{i}=y" for i in range(8))}]
    with pytest.raises(ExpoError) as refused:
        labels("align.cwl", eight, run)
    assert str(refused.value).startswith("hint expo:Labels of align.cwl: with the run's "
                                         "--expocloud-gce-labels, more than 57 labels")
    assert len(labels("align.cwl", eight)) == 9  # alone, they fit


INPUTS = [{"id": "tool.cwl#size", "type": "int"}, {"id": "tool.cwl#seed", "type": "int"}]


def test_noise_inputs_are_read_with_the_hint() -> None:
    hint = {"class": HARDNESS, "dimensions": ["size"], "noise": ["seed"], "deadline": "30s"}
    sweep = read_sweep("tool", INPUTS, [hint])
    assert sweep is not None and sweep.noise == ("seed",) and sweep.deadline_s == 30.0
    plain = read_sweep("tool", INPUTS, [{"class": HARDNESS, "dimensions": ["size"]}])
    assert plain is not None and plain.noise == ()


def test_a_noise_input_the_tool_lacks_is_refused() -> None:
    hint = {"class": HARDNESS, "dimensions": ["size"], "noise": ["instance"]}
    with pytest.raises(ExpoError, match="names the unknown input 'instance'"):
        read_sweep("tool", INPUTS, [hint])
