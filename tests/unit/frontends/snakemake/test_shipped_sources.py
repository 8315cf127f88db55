"""shipped_sources: a working directory below the workflow's sources is refused on the GCE
path before any VM, in one line naming the directive and the fix; one at or above them is
not."""

from __future__ import annotations

import pytest

from expo_executor.core.errors import ExpoError
from expo_executor.frontends.snakemake.shipped_sources import check_shipped, outside_workdir


def test_a_workdir_below_the_snakefile_is_refused_in_one_line() -> None:
    with pytest.raises(ExpoError) as caught:
        check_shipped("/w/Snakefile", ["/w/Snakefile", "/w/rules/a.smk", "/w/sub/b.smk"],
                      "/w/sub")
    line = str(caught.value)
    assert "\n" not in line and "workdir: / --directory" in line
    assert "(../Snakefile, ../rules/a.smk)" in line and "snakemake#2572" in line
    assert "fix:" in line and "snakemake -s DIR/Snakefile with workdir: DIR" in line


def test_sources_at_or_below_the_workdir_pass_and_urls_are_not_the_archives() -> None:
    check_shipped("/w/Snakefile", ["/w/Snakefile", "/w/rules/a.smk"], "/w")
    check_shipped("/w/sub/Snakefile", ["/w/sub/Snakefile"], "/w/sub")  # the fix it gives
    assert outside_workdir(["https://example.org/rules.smk", "/w/..x/y.smk"], "/w") == []
    assert outside_workdir(["/elsewhere/Snakefile"], "/w") == ["../elsewhere/Snakefile"]
