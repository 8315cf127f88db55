"""A CWL tool's expo:Labels hint (frontends/cwl/hints.py): its labels and name for its VMs,
or one line naming the hint, as the tool loads."""

from __future__ import annotations

import pytest

from expo_executor.core.errors import ExpoError
from expo_executor.frontends.cwl.hints import LABELS, labels


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
