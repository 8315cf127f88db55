"""A CWL tool's hints (frontends/cwl/hints.py): expo:Labels (its labels and name for its VMs,
or one line naming the hint, as the tool loads) and expo:Hardness's noise inputs (read with
the hint, checked against the tool's inputs like its dimensions and scope) and its skipAbove
(the tool's own model-skip threshold, named as the hint's in what a skip records; a
probability, and refused with a model set to 'none'; a workflow's tools that give one are
found before its first job, to turn the model on)."""

from __future__ import annotations

import pytest

from pathlib import Path

from cwltool.context import LoadingContext
from cwltool.load_tool import load_tool

from expo_executor.core.errors import ExpoError
from expo_executor.core.scheduler import SkipRule
from expo_executor.frontends.cwl.hints import (HARDNESS, LABELS, check_skip_model, labels,
                                               make_tool, read_sweep, register_schema,
                                               skip_hinted)


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


def test_skip_above_is_the_tools_own_threshold_named_as_the_hint() -> None:
    hint = {"class": HARDNESS, "dimensions": ["size"], "deadline": "30s", "skipAbove": 0.95}
    sweep = read_sweep("solve", INPUTS, [hint])
    assert sweep is not None and sweep.skip == SkipRule(0.95, "expo:Hardness skipAbove of solve")
    plain = read_sweep("solve", INPUTS, [{"class": HARDNESS, "dimensions": ["size"]}])
    assert plain is not None and plain.skip is None  # the run's --expocloud-skip-above


@pytest.mark.parametrize("bad", [0, 1, 1.5, -0.2])
def test_a_skip_above_outside_0_1_is_refused_naming_the_hint(bad: float) -> None:
    hint = {"class": HARDNESS, "dimensions": ["size"], "skipAbove": bad}
    with pytest.raises(ExpoError) as refused:
        read_sweep("solve", INPUTS, [hint])
    assert str(refused.value).startswith(f"hint expo:Hardness of solve: skipAbove {bad!r} is "
                                         "not a probability between 0 and 1")
    assert "0 < P < 1" in str(refused.value)


def test_a_skip_above_with_the_model_set_to_none_is_refused() -> None:
    hint = {"class": HARDNESS, "dimensions": ["size"], "skipAbove": 0.99, "deadline": "10m"}
    sweep = read_sweep("solve", INPUTS, [hint])
    check_skip_model("solve", sweep, None, False)  # not given: the hint turns the model on
    check_skip_model("solve", sweep, "learned", False)
    with pytest.raises(ExpoError, match="^hint expo:Hardness of solve: skipAbove needs a "
                                        "runtime model, and --expocloud-hardness-model is"):
        check_skip_model("solve", sweep, "none", False)


def test_a_skip_above_without_a_deadline_is_refused_unless_a_time_limit_gives_one() -> None:
    hint = {"class": HARDNESS, "dimensions": ["size"], "skipAbove": 0.99}
    sweep = read_sweep("solve", INPUTS, [hint])
    check_skip_model("solve", sweep, None, True)  # a ToolTimeLimit gives each job its deadline
    with pytest.raises(ExpoError, match="^hint expo:Hardness of solve: skipAbove needs a "
                                        "deadline to skip against, and the tool has none"):
        check_skip_model("solve", sweep, None, False)


TOOL = """cwlVersion: v1.2
class: CommandLineTool
$namespaces: {expo: "https://expocloud.dev/cwl#"}
inputs: {n: int}
baseCommand: [echo]
outputs: []
"""
WORKFLOW = """cwlVersion: v1.2
class: Workflow
$namespaces: {expo: "https://expocloud.dev/cwl#"}
inputs: {n: int}
outputs: []
steps:
  hinted:
    run: tool.cwl
    hints:
      expo:Hardness: {dimensions: [n], deadline: 30s, skipAbove: 0.9}
    in: {n: n}
    out: []
  plain:
    run: plain.cwl
    in: {n: n}
    out: []
"""


def test_the_tools_whose_hint_gives_skip_above_are_found_before_any_job(
        tmp_path: Path) -> None:
    """Through cwltool's own loader, as the runner loads a workflow: a step's hint reaches
    its tool, and the walk finds it; a tool with no hint is not named."""
    (tmp_path / "tool.cwl").write_text(TOOL)
    (tmp_path / "plain.cwl").write_text(TOOL.replace("inputs", "hints:\n  expo:Hardness: "
                                                     "{dimensions: [n]}\ninputs"))
    (tmp_path / "wf.cwl").write_text(WORKFLOW)
    register_schema()
    loading = LoadingContext({"construct_tool_object": make_tool})
    workflow = load_tool(str(tmp_path / "wf.cwl"), loading)
    assert skip_hinted(workflow) == ("tool.cwl",)
    assert skip_hinted(load_tool(str(tmp_path / "plain.cwl"), loading)) == ()
