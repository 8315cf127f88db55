"""The emulators answer a ``fields`` selector (or ``X-Goog-FieldMask``) as Google's services do
(a partial response), so a test of the coordinator's lean listings sees what the real service
would send: GCS's ``items(name,generation)``, Compute's map of zones ``items/*/instances(...)``."""

from __future__ import annotations

import pytest

from expo_executor.emulator.partial_response import field_tree, partial_response


def test_a_fields_selector_keeps_only_what_it_names() -> None:
    body = {"kind": "storage#objects", "nextPageToken": "t",
            "items": [{"name": "a", "generation": "1", "size": "3", "metadata": {"x": "y"}},
                      {"name": "b", "generation": "2", "md5Hash": "..."}]}
    tree = field_tree("items(name,generation),nextPageToken")
    assert tree == {"items": {"name": {}, "generation": {}}, "nextPageToken": {}}
    assert partial_response(body, tree) == {
        "nextPageToken": "t",
        "items": [{"name": "a", "generation": "1"}, {"name": "b", "generation": "2"}]}


def test_a_wildcard_keeps_every_key_of_a_map() -> None:
    body = {"items": {"zones/a": {"instances": [{"name": "w1", "status": "RUNNING",
                                                  "metadata": {"items": ["big"]}}]},
                      "zones/b": {"warning": {"code": "NO_RESULTS_ON_PAGE"}}},
            "kind": "compute#instanceAggregatedList"}
    for selector in ("items/*/instances(name,status)", "items.*.instances(name,status)"):
        assert partial_response(body, field_tree(selector)) == {
            "items": {"zones/a": {"instances": [{"name": "w1", "status": "RUNNING"}]},
                      "zones/b": {}}}


@pytest.mark.parametrize("bad", ["items(name", "items)name(", "(name)", "items/", "a,,b"])
def test_a_malformed_selector_is_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        field_tree(bad)
