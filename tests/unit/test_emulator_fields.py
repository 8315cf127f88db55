"""The GCS emulator answers a listing's ``fields`` selector as GCS does (a partial response),
so a test of the coordinator's lean listings sees what the real service would send."""

from __future__ import annotations

import pytest

from expo_executor.emulator.gcs import field_tree, partial_response


def test_a_fields_selector_keeps_only_what_it_names() -> None:
    body = {"kind": "storage#objects", "nextPageToken": "t",
            "items": [{"name": "a", "generation": "1", "size": "3", "metadata": {"x": "y"}},
                      {"name": "b", "generation": "2", "md5Hash": "..."}]}
    tree = field_tree("items(name,generation),nextPageToken")
    assert tree == {"items": {"name": {}, "generation": {}}, "nextPageToken": {}}
    assert partial_response(body, tree) == {
        "nextPageToken": "t",
        "items": [{"name": "a", "generation": "1"}, {"name": "b", "generation": "2"}]}


@pytest.mark.parametrize("bad", ["items(name", "items)name(", "(name)"])
def test_a_malformed_selector_is_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        field_tree(bad)
