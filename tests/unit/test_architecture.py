"""The package's architecture, checked from its source (parsed with ``ast``, never imported).

- no import cycles between modules of ``expo_executor``: every ``import`` and ``from`` counts,
  including those inside functions (a lazy import that closes a cycle is still a cycle);
- the core is pure: the standard library's pure parts and ``expo_executor.core``, nothing else;
- each subpackage imports only what its ``__init__`` docstring says it may (``LAYERS`` below);
- nothing but the command line imports the front ends or the emulator (the plugin shim, outside
  the package, imports the Snakemake front end);
- the cloud SDKs are imported only inside functions, so every module imports without them;
- no function or method is over 60 lines, docstring included;
- no module is over 400 lines: one that long holds more than one idea, and is split by idea;
- every subpackage's ``__init__`` has a docstring.

The checks are plain functions over parsed sources, and each is also run on a small made-up
package that breaks it: a check that cannot fail proves nothing.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = "expo_executor"
ROOT = Path(__file__).resolve().parents[2] / PACKAGE
MAX_FUNCTION_LINES = 60
MAX_MODULE_LINES = 400

# What the core may import: the standard library's pure parts. No files, clocks, randomness,
# threads, processes, sockets or serialisation: the layers that drive the core do those.
CORE_STDLIB = frozenset({
    "__future__", "abc", "bisect", "collections", "dataclasses", "enum", "fractions",
    "functools", "heapq", "itertools", "math", "numbers", "operator", "re", "statistics",
    "string", "typing",
})
# Optional dependencies (the gce, gcs and emulator extras): only ever imported lazily.
CLOUD_SDKS = frozenset({"google", "gcp_storage_emulator"})


@dataclass(frozen=True)
class Layer:
    """What a part of the package may import from ``expo_executor``, as module prefixes
    relative to the package: ``anywhere``, or ``lazily`` (only inside a function)."""

    anywhere: frozenset[str]
    lazily: frozenset[str] = frozenset()

    def plus(self, anywhere: Iterable[str] = (), lazily: Iterable[str] = ()) -> Layer:
        return Layer(self.anywhere | frozenset(anywhere), self.lazily | frozenset(lazily))


def _layer(*anywhere: str) -> Layer:
    return Layer(frozenset(anywhere))


_PROTOCOL = _layer("core.records", "core.errors", "core.hardness", "protocol", "gcp")
_ENGINES = _layer("core", "protocol", "engines", "gcp", "processes", "settings")
_COST = _layer("core", "cost", "runs", "gcp")

# One row per subpackage (and top-level module), as its __init__ docstring states it; no module
# is an exception to its package's row (test_no_module_is_an_exception_to_its_package). A module
# follows its most specific row.
LAYERS: Mapping[str, Layer] = {
    "core": _layer("core"),
    # leaves: what several layers share, importing nothing of the executor but the core
    "gcp": _layer("gcp"),
    "processes": _layer("processes"),
    "runs": _layer("runs"),
    "notify": _layer("core", "notify"),
    # the settings every engine reads, their per-engine defaults (one table) and checks
    "settings": _layer("core", "settings"),
    "protocol": _PROTOCOL,
    "worker": _layer("core.records", "core.hardness", "core.held_jobs", "protocol", "processes",
                     "worker").plus(lazily=["engines.gce.guest"]),
    "engines": _ENGINES,
    "cost": _COST,
    # the saved runtime models are read back (refitted) by learned: numpy and scipy load only
    # when a report finds one
    "report": _layer("core", "cost", "runs", "report").plus(lazily=["learned"]),
    # the learned runtime model: numpy and scipy inside its functions only
    "learned": _layer("core", "learned"),
    "simulate": _layer("core", "cost", "simulate", "runs", "settings", "report", "learned"),
    "coordinator": _layer("core", "protocol", "engines", "cost", "gcp", "runs", "settings",
                          "notify", "coordinator"),
    "emulator": _layer("emulator", "processes", "protocol.keys"),
    # "everything below them": the docstring's list leaves out the worker, whose path check
    # (worker.staged_job.safe_relative) the CWL staging shares
    "frontends": _layer("core", "protocol", "coordinator", "cost", "runs", "settings",
                        "engines.gce.launch", "engines.gce.settings",
                        "engines.gce.settings_checks", "worker", "frontends"),
    "cli": _layer("core", "protocol", "coordinator", "cost", "runs", "settings", "engines",
                  "worker", "simulate", "report", "emulator", "frontends"),
    "__init__": _layer(),
}
# Who may import the front ends and the emulator: the command line (and themselves).
TOP_ONLY = ("frontends", "emulator")


# -- reading the package ----------------------------------------------------------------------


@dataclass(frozen=True)
class Source:
    """One module's source, its dotted name, and whether it is a package's ``__init__``."""

    module: str
    text: str
    is_package: bool = False


@dataclass(frozen=True)
class Import:
    """One imported name: the module that imports it, what it resolves to, where, and whether
    the statement sits inside a function (a lazy import)."""

    importer: str
    target: str
    line: int
    lazy: bool

    def where(self) -> str:
        return f"{self.importer}:{self.line}{' (lazy)' if self.lazy else ''}"


def read_package(root: Path = ROOT, package: str = PACKAGE) -> list[Source]:
    """Every module of the package under ``root``, with its dotted name."""
    sources = []
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        is_package = parts[-1] == "__init__"
        module = ".".join((package, *(parts[:-1] if is_package else parts)))
        sources.append(Source(module, path.read_text(encoding="utf-8"), is_package))
    return sources


def _resolve_relative(source: Source, level: int, module: str | None) -> str:
    base = source.module.split(".")
    if not source.is_package:
        base = base[:-1]
    if level > 1:
        base = base[:-(level - 1)]
    return ".".join(base + ([module] if module else []))


def _statements(node: ast.AST, in_function: bool = False) -> Iterator[tuple[ast.stmt, bool]]:
    """Every import statement under ``node``, and whether it lies inside a function."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child, in_function
        nested = isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        yield from _statements(child, in_function or nested)


def imports_of(source: Source, modules: frozenset[str]) -> list[Import]:
    """What ``source`` imports. ``from a import b`` names the module ``a.b`` when there is one
    among ``modules``, else ``a``; relative imports are resolved."""
    found = []
    for node, lazy in _statements(ast.parse(source.text, filename=source.module)):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            base = (_resolve_relative(source, node.level, node.module) if node.level
                    else node.module or "")
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                       for alias in node.names]
        found += [Import(source.module, target, node.lineno, lazy) for target in targets]
    return found


def import_graph(sources: Iterable[Source], package: str = PACKAGE) -> dict[str, list[Import]]:
    """Each module of the package, with its imports of other modules of the package."""
    sources = list(sources)
    modules = frozenset(source.module for source in sources)
    return {source.module: [imp for imp in imports_of(source, modules)
                            if imp.target.split(".")[0] == package and imp.target != source.module]
            for source in sources}


# -- the checks ---------------------------------------------------------------------------------


def find_cycle(graph: Mapping[str, list[Import]]) -> list[Import]:
    """One import cycle, as the imports that close it, or [] when there is none."""
    done: set[str] = set()
    stack: list[str] = []  # the modules on the current path; path[i] imports stack[i + 1]
    path: list[Import] = []

    def visit(module: str) -> list[Import]:
        stack.append(module)
        for imp in graph.get(module, []):
            if imp.target in stack:
                return path[stack.index(imp.target):] + [imp]
            if imp.target in graph and imp.target not in done:
                path.append(imp)
                cycle = visit(imp.target)
                if cycle:
                    return cycle
                path.pop()
        stack.pop()
        done.add(module)
        return []

    for module in sorted(graph):
        cycle = [] if module in done else visit(module)
        if cycle:
            return cycle
    return []


def describe_cycle(cycle: list[Import]) -> str:
    modules = " -> ".join([imp.importer for imp in cycle] + [cycle[0].importer])
    return f"{modules}  ({', '.join(imp.where() for imp in cycle)})"


def _relative(module: str) -> str:
    """``expo_executor.engines.gce`` -> ``engines.gce``; the package itself -> ``__init__``."""
    return module.partition(".")[2] or "__init__"


def _within(module: str, prefixes: Iterable[str]) -> bool:
    name = _relative(module)
    return any(name == prefix or name.startswith(prefix + ".") for prefix in prefixes)


def row_of(module: str, layers: Mapping[str, Layer] = LAYERS) -> str | None:
    """The most specific row of ``layers`` that ``module`` falls under."""
    rows = [row for row in layers if _within(module, [row])]
    return max(rows, key=len) if rows else None


def layer_violations(graph: Mapping[str, list[Import]], row: str,
                     layers: Mapping[str, Layer] = LAYERS) -> list[str]:
    """The imports of the modules under ``row`` that their layer does not allow."""
    layer = layers[row]
    return [f"{imp.where()} imports {imp.target}"
            for module, imports in graph.items() if row_of(module, layers) == row
            for imp in imports
            if not (_within(imp.target, layer.anywhere)
                    or (imp.lazy and _within(imp.target, layer.lazily)))]


def impure_core_imports(sources: Iterable[Source], allowed: frozenset[str] = CORE_STDLIB) -> list[str]:
    """Imports of the core that are neither ``allowed`` standard modules nor the core."""
    core = [source for source in sources if _within(source.module, ["core"])]
    modules = frozenset(source.module for source in core)
    return [f"{imp.where()} imports {imp.target}"
            for source in core for imp in imports_of(source, modules)
            if imp.target.split(".")[0] not in allowed and not _within(imp.target, ["core"])]


def eager_imports_of(sources: Iterable[Source], names: frozenset[str] = CLOUD_SDKS) -> list[str]:
    """Module-level imports of ``names`` (top-level packages)."""
    return [f"{imp.where()} imports {imp.target}"
            for source in sources for imp in imports_of(source, frozenset())
            if not imp.lazy and imp.target.split(".")[0] in names]


def long_functions(sources: Iterable[Source], limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """Functions and methods longer than ``limit`` lines (from ``def`` to their last line)."""
    return [f"{source.module}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for source in sources for node in ast.walk(ast.parse(source.text))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > limit]


def long_modules(sources: Iterable[Source], limit: int = MAX_MODULE_LINES) -> list[str]:
    """Modules longer than ``limit`` lines (a last line without its newline counts too)."""
    return [f"{source.module} ({lines} lines)" for source in sources
            if (lines := len(source.text.splitlines())) > limit]


def packages_without_docstring(sources: Iterable[Source]) -> list[str]:
    return [source.module for source in sources
            if source.is_package and not ast.get_docstring(ast.parse(source.text))]


# -- the package ---------------------------------------------------------------------------------

SOURCES = read_package()
GRAPH = import_graph(SOURCES)


def _report(problem: str, found: list[str]) -> str:
    return f"{problem}:\n" + "\n".join(found)


def test_every_module_has_a_row() -> None:
    """A new subpackage or top-level module needs its row in LAYERS, from its docstring."""
    subpackages = {_relative(source.module) for source in SOURCES
                   if source.is_package and source.module.count(".") == 1}
    assert subpackages <= set(LAYERS)
    assert [source.module for source in SOURCES if row_of(source.module) is None] == []


def test_no_module_is_an_exception_to_its_package() -> None:
    """One row per subpackage or top-level module: what several layers share is a leaf package
    of its own (``gcp``, ``processes``, ``runs``, ``settings``), never a module's exception row."""
    assert [row for row in LAYERS if "." in row] == []


def test_no_import_cycles() -> None:
    cycle = find_cycle(GRAPH)
    assert not cycle, f"import cycle: {describe_cycle(cycle)}"


def test_the_core_is_pure() -> None:
    bad = impure_core_imports(SOURCES)
    assert not bad, _report("the core imports more than the pure standard library", bad)


@pytest.mark.parametrize("row", sorted(LAYERS))
def test_imports_are_what_the_docstrings_allow(row: str) -> None:
    bad = layer_violations(GRAPH, row)
    assert not bad, _report(f"{row} imports what its docstring does not allow", bad)


def test_only_the_command_line_imports_the_front_ends_and_the_emulator() -> None:
    bad = sorted(f"{imp.where()} imports {imp.target}"
                 for imports in GRAPH.values() for imp in imports
                 if _within(imp.target, TOP_ONLY)
                 and not _within(imp.importer, ["cli", _relative(imp.target).split(".")[0]]))
    assert not bad, _report("only the command line may import these", bad)


def test_the_cloud_sdks_are_imported_lazily() -> None:
    bad = eager_imports_of(SOURCES)
    assert not bad, _report("import these inside the functions that use them", bad)


def test_no_function_is_over_60_lines() -> None:
    bad = long_functions(SOURCES)
    assert not bad, _report("split these into short named steps", bad)


def test_no_module_is_over_400_lines() -> None:
    bad = long_modules(SOURCES)
    assert not bad, _report("split these by idea into modules of the same package", bad)


def test_every_subpackage_has_a_docstring() -> None:
    bad = packages_without_docstring(SOURCES)
    assert not bad, _report("say what these own and may import", bad)


# -- the checks can fail ---------------------------------------------------------------------------

MADE_UP = [
    Source("pkg", '"""Top."""\n', is_package=True),
    Source("pkg.core", "", is_package=True),
    Source("pkg.core.a", "import os\nfrom . import b\n"),
    Source("pkg.core.b", "def f():\n    from pkg.core.a import x\n    return x\n"),
    Source("pkg.io", '"""I/O."""\n', is_package=True),
    Source("pkg.io.c", "from ..core.b import f\n" + "def g():\n" + "    pass\n" * 61),
]


def test_a_lazy_import_that_closes_a_cycle_is_found() -> None:
    cycle = find_cycle(import_graph(MADE_UP, package="pkg"))
    assert [imp.importer for imp in cycle] == ["pkg.core.a", "pkg.core.b"]
    assert describe_cycle(cycle) == ("pkg.core.a -> pkg.core.b -> pkg.core.a  "
                                     "(pkg.core.a:2, pkg.core.b:2 (lazy))")


def test_relative_imports_are_resolved() -> None:
    graph = import_graph(MADE_UP, package="pkg")
    assert [imp.target for imp in graph["pkg.io.c"]] == ["pkg.core.b"]
    assert [imp.target for imp in graph["pkg.core.a"]] == ["pkg.core.b"]


def test_a_graph_without_cycles_passes() -> None:
    graph = import_graph([Source("pkg", "from pkg.a import x\n", is_package=True),
                          Source("pkg.a", "import pkg.b\n"), Source("pkg.b", "import json\n")],
                         package="pkg")
    assert find_cycle(graph) == []


def test_an_impure_core_import_is_found() -> None:
    made_up = [Source(f"{PACKAGE}.core.a", "import os\nimport math\nfrom expo_executor.protocol "
                      "import keys\nfrom expo_executor.core import b\n"),
               Source(f"{PACKAGE}.core.b", "from typing import Any\n")]
    assert impure_core_imports(made_up) == [f"{PACKAGE}.core.a:1 imports os",
                                            f"{PACKAGE}.core.a:3 imports {PACKAGE}.protocol"]


def test_a_forbidden_or_eager_import_breaks_a_layer() -> None:
    made_up = [Source(f"{PACKAGE}.worker.agent", "from expo_executor.coordinator import loop\n"
                      "from expo_executor.engines.gce import guest\n"
                      "def f():\n    from expo_executor.engines.gce import guest\n"),
               Source(f"{PACKAGE}.engines.gce.guest", "")]
    assert layer_violations(import_graph(made_up), "worker") == [
        f"{PACKAGE}.worker.agent:1 imports {PACKAGE}.coordinator",
        f"{PACKAGE}.worker.agent:2 imports {PACKAGE}.engines.gce.guest"]


def test_a_module_follows_its_most_specific_row() -> None:
    layers = {"engines": LAYERS["engines"],
              "engines.gce.launch": LAYERS["engines"].plus(["coordinator.settings"])}
    assert row_of(f"{PACKAGE}.engines.gce.launch", layers) == "engines.gce.launch"
    assert row_of(f"{PACKAGE}.engines.gce.engine", layers) == "engines"
    made_up = [Source(f"{PACKAGE}.engines.gce.{name}", "import expo_executor.coordinator.settings\n")
               for name in ("engine", "launch")]
    assert layer_violations(import_graph(made_up), "engines", layers) == [
        f"{PACKAGE}.engines.gce.engine:1 imports {PACKAGE}.coordinator.settings"]
    assert layer_violations(import_graph(made_up), "engines.gce.launch", layers) == []


def test_an_eager_cloud_import_is_found() -> None:
    made_up = [Source("pkg.a", "from google.cloud import storage\n"
                      "def f():\n    import google.auth\n")]
    assert eager_imports_of(made_up) == ["pkg.a:1 imports google.cloud"]


def test_a_long_function_and_a_missing_docstring_are_found() -> None:
    assert long_functions(MADE_UP) == ["pkg.io.c:2 g (62 lines)"]
    assert packages_without_docstring(MADE_UP) == ["pkg.core"]


def test_a_long_module_is_found() -> None:
    at_the_limit = Source("pkg.a", "x = 1\n" * MAX_MODULE_LINES)
    over_it = Source("pkg.b", "x = 1\n" * MAX_MODULE_LINES + "y = 2")  # the last line unended
    assert long_modules([at_the_limit, over_it, *MADE_UP]) == ["pkg.b (401 lines)"]
