"""The house rules, checked on the source: no import cycles, small modules, streamlit only in the UI,
every page listed once."""

from __future__ import annotations

import ast
from pathlib import Path

from specviz.ui.navigation import PAGES

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "specviz"
MODULE_LINES_MAX = 250


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


def imported_modules(path: Path) -> set[str]:
    """Every specviz module ``path`` imports, at the top or deferred inside a function (a deferred import
    hides a cycle from Python, not from this check), with the packages whose ``__init__`` each runs (except
    the importer's own packages, which Python has begun to initialise before the importer runs)."""
    own = module_name(path).split(".")
    own_packages = {".".join(own[:i]) for i in range(1, len(own) + 1)}
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            found |= {".".join(parts[:i]) for i in range(2, len(parts) + 1)} & MODULES.keys()
    return found - (own_packages - {module_name(path)})


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm)."""
    index, low, stack, on_stack, found, counter = {}, {}, [], set(), [], [0]

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return found


def test_the_package_has_no_import_cycles():
    graph = {name: imported_modules(path) - {name} for name, path in MODULES.items()}
    assert cycles(graph) == []


def test_the_cycle_check_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_module_is_over_the_line_budget():
    long = {name: n for name, path in MODULES.items() if (n := len(path.read_text().splitlines())) > MODULE_LINES_MAX}
    assert long == {}


def test_only_the_ui_imports_streamlit():
    importers = {name for name, path in MODULES.items()
                 if any(isinstance(node, (ast.Import, ast.ImportFrom))
                        and any(a.name.split(".")[0] == "streamlit" for a in node.names)
                        or isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "streamlit"
                        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))))}
    assert importers and all(name.startswith("specviz.ui") for name in importers), importers


def test_every_page_file_is_listed_once():
    listed = [p.script for p in PAGES]
    assert sorted(listed) == sorted(p.stem for p in (ROOT / "pages").glob("*.py"))
    assert len(set(listed)) == len(listed) and len({p.title for p in PAGES}) == len(PAGES)
    assert all(p.icon.startswith(":material/") for p in PAGES)  # no emoji font needed


def test_every_package_folder_is_a_regular_package():
    folders = {p.parent for p in PACKAGE.rglob("*.py")}
    assert all((folder / "__init__.py").is_file() for folder in folders), sorted(map(str, folders))


def test_every_lane_names_a_test_module():
    from tests.conftest import LANES

    here = Path(__file__).resolve().parent
    assert [name for name in LANES if not (here / f"{name}.py").is_file()] == []  # a renamed module keeps its lane
