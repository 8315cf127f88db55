"""The docs agree with the code: every setting and every command's flag is documented, every
command in the README's code blocks parses with the real parsers, the links resolve, and the
catalog pages (docs/intro.md, docs/further.md) have the form the Snakemake plugin catalog wants.

The lists come from the real parsers and the real settings dataclass, so a new flag that is not
documented fails here, and a README command that no longer parses fails before a newcomer tries
it. Each check is a function over text, also run on a made-up text that breaks it.
"""

from __future__ import annotations

import argparse
import configparser
import dataclasses
import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest

from expo_executor import cli
from expo_executor.coordinator.settings import ExecutorSettings as CoreSettings
from expo_executor.coordinator.settings import validate
from expo_executor.core.errors import ExpoError
from expo_executor.frontends.cwl import runner
from snakemake_executor_plugin_expocloud import ExecutorSettings

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DOCS = sorted((REPO / "docs").glob("*.md"))
SETTING_PREFIX = "--expocloud-"
# a GCE run with exactly what it needs: each field left out in turn must be refused
GCE_MINIMUM = {"engine": "gce", "gce_project": "p", "gce_zones": "us-central1-a",
               "max_workers": 2, "gce_service_account": "w@p.iam.gserviceaccount.com"}


# -- reading the docs ----------------------------------------------------------------------------

def doc_text() -> str:
    return "\n\n".join(p.read_text(encoding="utf-8") for p in [README, *DOCS])


def paragraphs(text: str) -> list[str]:
    """Blocks between blank lines, each table row a block of its own (a row documents one
    command; the whole table would document every flag for every command)."""
    blocks = []
    for block in re.split(r"\n\s*\n", text):
        rows = [line for line in block.splitlines() if line.lstrip().startswith("|")]
        rest = "\n".join(line for line in block.splitlines() if line not in rows)
        blocks += rows + ([rest] if rest.strip() else [])
    return blocks


def mentions(text: str, word: str) -> bool:
    """``word`` as a whole token (not part of a longer flag or name)."""
    return re.search(rf"(?<![\w-]){re.escape(word)}(?![\w-])", text) is not None


def code_blocks(text: str, language: str) -> list[list[str]]:
    return [block.splitlines() for block in
            re.findall(rf"^```{language}\n(.*?)^```", text, re.S | re.M)]


# -- what the code has ---------------------------------------------------------------------------

def setting_flags() -> list[str]:
    return [SETTING_PREFIX + f.name.replace("_", "-") for f in dataclasses.fields(ExecutorSettings)]


def snakemake_parser() -> argparse.ArgumentParser:
    from snakemake.cli import get_argument_parser
    return get_argument_parser()


def subcommands() -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in cli.build_parser()._actions
               if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def documented_flags(parser: argparse.ArgumentParser) -> Iterator[list[str]]:
    """Each option's long flags, help and settings (--expocloud-*, checked on their own) left out."""
    for action in parser._actions:
        longs = [o for o in action.option_strings if o.startswith("--") and o != "--help"]
        if longs and action.help != argparse.SUPPRESS \
                and not any(o.startswith(SETTING_PREFIX) for o in longs):
            yield longs


def cwl_own_flags() -> list[list[str]]:
    parser = runner.build_parser()
    group = next(g for g in parser._action_groups if g.title == "expocloud")
    return [[o for o in a.option_strings if o.startswith("--")] for a in group._group_actions
            if not any(o in setting_flags() for o in a.option_strings)]


# -- the checks, as functions over text ----------------------------------------------------------

def undocumented_settings(text: str) -> list[str]:
    return [flag for flag in setting_flags()
            if not mentions(text, flag) and not mentions(text, flag.lstrip("-"))]


def undocumented_command_flags(text: str, command: str, flags: list[list[str]]) -> list[str]:
    """Flags of ``command`` that no paragraph naming the command mentions."""
    about = [p for p in paragraphs(text) if mentions(p, command)]
    return [longs[0] for longs in flags
            if not any(mentions(p, flag) for p in about for flag in longs)]


def test_the_settings_checks_are_the_snakemake_command_lines() -> None:
    given = {o for a in snakemake_parser()._actions for o in a.option_strings
             if o.startswith(SETTING_PREFIX)}
    assert given == set(setting_flags())


def test_every_setting_is_documented() -> None:
    assert undocumented_settings(doc_text()) == []
    assert undocumented_settings("`--expocloud-engine` only") != []


def test_every_expocloud_subcommand_and_its_flags_are_documented() -> None:
    text = doc_text()
    missing = {name: undocumented_command_flags(text, f"expocloud {name}",
                                                list(documented_flags(parser)))
               for name, parser in subcommands().items()}
    assert {name: flags for name, flags in missing.items() if flags} == {}
    assert [name for name in subcommands() if not mentions(text, f"expocloud {name}")] == []
    broken = "| `expocloud cleanup` | `--project P` |\n| `expocloud prices` | `--endpoint URL` |"
    assert "--endpoint" in undocumented_command_flags(broken, "expocloud cleanup",
                                                      [["--endpoint"], ["--project"]])


def test_every_expocloud_cwl_flag_is_documented() -> None:
    flags = cwl_own_flags()
    assert ["--expocloud-profile"] in flags and ["--default-storage-prefix"] in flags
    assert undocumented_command_flags(doc_text(), "expocloud-cwl", flags) == []


def test_what_gce_requires_is_what_the_help_and_the_docs_say() -> None:
    """The settings whose absence a GCE run refuses, found by taking each away in turn (on the
    core's dataclass: the plugin's also loads Google credentials as it is built)."""
    validate(CoreSettings(**GCE_MINIMUM))
    required = []
    for name in GCE_MINIMUM:
        if name == "engine":
            continue
        with pytest.raises(ExpoError) as refused:
            validate(CoreSettings(**{**GCE_MINIMUM, name: None}))
        assert refused.value.setting == SETTING_PREFIX + name.replace("_", "-")
        required.append(name)
    fields = {f.name: f for f in dataclasses.fields(ExecutorSettings)}
    for name in required:
        assert "required" in fields[name].metadata["help"].lower(), name
    settings_page = (REPO / "docs" / "settings.md").read_text(encoding="utf-8")
    for name in required:
        row = next(line for line in settings_page.splitlines()
                   if line.startswith(f"| `{SETTING_PREFIX}{name.replace('_', '-')}`"))
        assert "required" in row, row


# -- the README's commands -----------------------------------------------------------------------

def commands(line: str) -> list[list[str]]:
    """The simple commands of a shell line: split at && || ; | & and parentheses, with leading
    VAR=value assignments dropped."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    found, current = [], []
    for token in lexer:
        if token and set(token) <= set("&|;()"):
            found.append(current)
            current = []
        else:
            current.append(token)
    found.append(current)
    return [[w for i, w in enumerate(c) if not (re.fullmatch(r"[A-Z_]+=.*", w)
                                                 and all("=" in x for x in c[:i + 1]))]
            for c in found if c]


def repo_url() -> str:
    config = configparser.ConfigParser()
    config.read(REPO / "setup.cfg")
    return config["metadata"]["url"]


def check_command(words: list[str], folder: Path | None) -> None:
    """Raise AssertionError unless the command parses (or has the right shape)."""
    program = Path(words[0]).name
    args = words[1:]
    try:
        if program == "snakemake":
            parsed = snakemake_parser().parse_args(args)
            for profile in parsed.profile or []:
                assert folder is None or (folder / profile).is_dir(), profile
        elif program == "expocloud":
            cli.build_parser().parse_args(args)
        elif program == "expocloud-cwl":
            parsed = runner.build_parser().parse_args(args)
            paths = [parsed.workflow, parsed.job_order[0] if parsed.job_order else None,
                     parsed.expocloud_profile]
            for path in filter(None, paths):
                assert folder is None or (folder / path).exists(), path
        else:
            check_shape(program, args, folder)
    except SystemExit:
        raise AssertionError(f"{' '.join(words)}: the parser refuses it") from None


def check_shape(program: str, args: list[str], folder: Path | None) -> None:
    if program in ("pip", "pip3"):
        assert args[0] == "install" and len(args) >= 2, args
    elif program in ("python", "python3"):
        assert (args[:2] == ["-m", "venv"] and len(args) == 3) or args[:2] == ["-m", "pytest"], \
            args
    elif program == "git":
        assert args[:2] == ["clone", repo_url()], args
    elif program == "cd":
        assert len(args) == 1 and (folder is None or (folder / args[0]).is_dir()), args
    else:
        raise AssertionError(f"{program}: a command this test does not know; teach it")


def block_folder(first_line: str) -> Path | None:
    """``# in FOLDER``: a repository folder (the clone's is the root) or None for the
    user's own folders, where paths cannot be checked."""
    match = re.fullmatch(r"# in (.+)", first_line.strip())
    assert match, f"a README shell block starts with '# in FOLDER', not {first_line!r}"
    where = match.group(1)
    if where.startswith("the clone"):
        return REPO
    if (REPO / where).is_dir():
        return REPO / where
    assert where in ("any folder", "your workflow's folder"), where
    return None


def readme_commands() -> list[tuple[Path | None, list[str]]]:
    found = []
    for block in code_blocks(README.read_text(encoding="utf-8"), "bash"):
        folder = block_folder(block[0])
        for line in block[1:]:
            for words in commands(line):
                found.append((folder, words))
                if words[0] == "cd" and folder is not None:
                    folder = folder / words[1]
    return found


def test_every_command_in_the_readme_parses() -> None:
    found = readme_commands()
    programs = {Path(words[0]).name for _, words in found}
    assert {"snakemake", "expocloud", "expocloud-cwl", "pip"} <= programs
    for folder, words in found:
        check_command(words, folder)


def test_a_command_the_parsers_refuse_fails_the_check() -> None:
    with pytest.raises(AssertionError):
        check_command(["snakemake", "--no-such-flag"], None)
    with pytest.raises(AssertionError):
        check_command(["expocloud", "cleanup", "--zones", "z"], None)  # --project is required
    with pytest.raises(AssertionError):
        check_command(["snakemake", "--profile", "profiles/missing"], REPO)
    assert commands("A=1 B=2 ../x/snakemake --profile p && (y &)") == \
        [["../x/snakemake", "--profile", "p"], ["y"]]


# -- links and the catalog's form ----------------------------------------------------------------

def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    return {slug(h) for h in re.findall(r"^#{1,6} (.+)$", path.read_text(encoding="utf-8"),
                                        re.M)}


def broken_links(path: Path) -> list[str]:
    """Links to this repository's files (relative, or absolute under setup.cfg's url) whose
    file or heading does not exist."""
    base = repo_url() + "/blob/main/"
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", path.read_text(encoding="utf-8")):
        if target.startswith(base):
            file, _, anchor = target[len(base):].partition("#")
            resolved = REPO / file
        elif target.startswith(("http://", "https://")):
            continue
        else:
            file, _, anchor = target.partition("#")
            resolved = (path.parent / file) if file else path
        if not resolved.exists() or (anchor and resolved.suffix == ".md"
                                     and anchor not in anchors(resolved)):
            broken.append(target)
    return broken


def test_links_resolve() -> None:
    assert {p.name: broken_links(p) for p in [README, *DOCS] if broken_links(p)} == {}
    assert slug("Machine selection: `--expocloud-machine-type auto`") == \
        "machine-selection---expocloud-machine-type-auto"


def test_the_catalog_pages_have_the_catalogs_form() -> None:
    intro = (REPO / "docs" / "intro.md").read_text(encoding="utf-8")
    further = (REPO / "docs" / "further.md").read_text(encoding="utf-8")
    assert not re.search(r"^# ", intro + "\n" + further, re.M), "the catalog adds the H1"
    assert not re.search(r"^#{4,} ", further, re.M), "H2 and H3 only"
    assert "-j" in intro and "Compute Engine" in intro and "next" not in intro
    headings = re.findall(r"^## (.+)$", further, re.M)
    for task in ("Add hardness", "Google Compute Engine", "Cap spending", "Resume after a crash",
                 "Clean up VMs", "CWL"):
        assert any(task in h for h in headings), task
    assert re.search(r"^### Pick machines$", further, re.M)
    relative = [t for t in re.findall(r"\]\(([^)#\s][^)\s]*)\)", further)
                if not t.startswith("https://")]
    assert relative == [], "the catalog shows further.md elsewhere: links must be absolute"


def test_the_cwl_profile_rule_names_every_ignored_key() -> None:
    cwl = (REPO / "docs" / "cwl.md").read_text(encoding="utf-8")
    assert [key for key in sorted(runner.SNAKEMAKE_ONLY) if f"`{key}`" not in cwl] == []
