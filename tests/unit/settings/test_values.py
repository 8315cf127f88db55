"""The runtime model in force (settings/values.py): what a run gets when it names none. A
skip needs a model, so the run-wide --expocloud-skip-above and a CWL tool's skipAbove hint
each turn the learned model on; a named model is kept; with neither, none (today's order)."""

from __future__ import annotations

import dataclasses

from expo_executor.settings.fields import Settings
from expo_executor.settings.values import hardness_model


def test_a_skip_setting_or_a_hints_skip_turns_the_learned_model_on() -> None:
    plain = Settings()
    assert hardness_model(plain) == "none"
    assert hardness_model(plain, skip_hinted=True) == "learned"
    assert hardness_model(dataclasses.replace(plain, skip_above=0.99)) == "learned"
    own = dataclasses.replace(plain, hardness_model="mine:factory")
    assert hardness_model(own, skip_hinted=True) == "mine:factory"
