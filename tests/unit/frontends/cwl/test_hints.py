"""The expo:Hardness hint's noise inputs (frontends/cwl/hints.py): read with the hint, checked
against the tool's inputs like its dimensions and scope."""

from __future__ import annotations

import pytest

from expo_executor.core.errors import ExpoError
from expo_executor.frontends.cwl.hints import HARDNESS, read_sweep

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
