"""The --workflow-profile trap (frontends/snakemake/workflow_profile.py): a run whose rules lack
the hardness or deadline the workflow's profiles/default declares is told so in one line."""

from __future__ import annotations

from pathlib import Path

from expo_executor.frontends.snakemake import workflow_profile

DEFAULT = """\
jobs: 1000
keep-going: true
set-resources:
  solve:
    hardness: "variant:a<b, n"
    deadline: 6s
  aggregate:
    mem_mb: 100
"""


def _workflow(tmp_path: Path, profile: str | None = DEFAULT) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "Snakefile").write_text("rule solve:\n    output: 'x'\n    shell: 'true'\n")
    if profile is not None:
        (tmp_path / "profiles" / "default").mkdir(parents=True)
        (tmp_path / "profiles" / "default" / "config.yaml").write_text(profile)
    return tmp_path / "Snakefile"


def test_a_run_without_the_declared_hardness_is_warned_in_one_line(tmp_path: Path) -> None:
    snakefile = _workflow(tmp_path)
    line = workflow_profile.check(snakefile, tmp_path, {"solve": {"_cores", "mem_mb"},
                                                        "aggregate": {"mem_mb"}})
    assert line is not None and "\n" not in line
    assert "rule solve: hardness and deadline" in line
    assert "profiles/default/config.yaml" in line
    assert "--profile" in line and "aggregate" not in line


def test_a_run_that_has_them_is_not_warned(tmp_path: Path) -> None:
    snakefile = _workflow(tmp_path)
    rules = {"solve": {"hardness", "deadline", "_cores"}, "aggregate": {"mem_mb"}}
    assert workflow_profile.check(snakefile, tmp_path, rules) is None


def test_only_what_is_missing_is_named(tmp_path: Path) -> None:
    snakefile = _workflow(tmp_path)
    line = workflow_profile.check(snakefile, tmp_path, {"solve": {"hardness"}})
    assert line is not None and "rule solve: deadline" in line and "hardness and" not in line


def test_no_default_profile_or_no_annotations_means_no_warning(tmp_path: Path) -> None:
    assert workflow_profile.check(_workflow(tmp_path / "a", None), tmp_path / "a",
                                  {"solve": set()}) is None
    plain = _workflow(tmp_path / "b", "jobs: 10\n")
    assert workflow_profile.check(plain, tmp_path / "b", {"solve": set()}) is None


def test_the_snakefiles_folder_is_searched_when_the_working_directory_has_none(
        tmp_path: Path) -> None:
    snakefile = _workflow(tmp_path / "wf")
    (tmp_path / "elsewhere").mkdir()
    line = workflow_profile.check(snakefile, tmp_path / "elsewhere", {"solve": set()})
    assert line is not None and str(tmp_path / "wf") in line


def test_list_form_of_set_resources_is_read(tmp_path: Path) -> None:
    snakefile = _workflow(tmp_path, "set-resources:\n  - solve:hardness='n'\n")
    assert workflow_profile.declared(tmp_path / "profiles/default/config.yaml") == \
        {"solve": {"hardness"}}
    assert workflow_profile.check(snakefile, tmp_path, {"solve": set()}) is not None


def test_rules_the_workflow_does_not_have_are_ignored() -> None:
    assert workflow_profile.lost({"gone": {"hardness"}}, {"solve": set()}) == {}


def test_an_unreadable_profile_declares_nothing(tmp_path: Path) -> None:
    _workflow(tmp_path, "expocloud-no-such-setting: 1\n")
    assert workflow_profile.declared(tmp_path / "profiles/default/config.yaml") == {}
