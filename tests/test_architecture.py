"""The house rules, checked on the source: no import cycles, small modules, streamlit only in the UI,
every page listed once."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from specviz.ui.navigation import PAGES

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "specviz"
MODULE_LINES_MAX = 250


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


def without_type_checking(tree: ast.Module) -> ast.Module:
    """``tree`` without the bodies of its ``if TYPE_CHECKING:`` blocks."""
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            node.body = [ast.Pass()]
    return tree


def imported_modules(path: Path) -> set[str]:
    """Every specviz module ``path`` imports, at the top or deferred inside a function (a deferred import
    hides a cycle from Python, not from this check), with the packages whose ``__init__`` each runs (except
    the importer's own packages, which Python has begun to initialise before the importer runs). Imports under
    ``if TYPE_CHECKING:`` are left out: they never run (the type checker reads them)."""
    own = module_name(path).split(".")
    own_packages = {".".join(own[:i]) for i in range(1, len(own) + 1)}
    found = set()
    for node in ast.walk(without_type_checking(ast.parse(path.read_text(encoding="utf-8")))):
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
    importers = {
        name
        for name, path in MODULES.items()
        if any(
            isinstance(node, (ast.Import, ast.ImportFrom))
            and any(a.name.split(".")[0] == "streamlit" for a in node.names)
            or isinstance(node, ast.ImportFrom)
            and (node.module or "").split(".")[0] == "streamlit"
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        )
    }
    assert importers and all(name.startswith("specviz.ui") for name in importers), importers


def test_every_page_file_is_listed_once():
    listed = [p.script for p in PAGES]
    assert sorted(listed) == sorted(p.stem for p in (PACKAGE / "ui" / "pages").glob("*.py"))
    assert len(set(listed)) == len(listed) and len({p.title for p in PAGES}) == len(PAGES)
    assert all(p.icon.startswith(":material/") for p in PAGES)  # no emoji font needed


def test_every_package_folder_is_a_regular_package():
    folders = {p.parent for p in PACKAGE.rglob("*.py")} - {PACKAGE / "ui" / "pages"}  # scripts streamlit runs
    assert all((folder / "__init__.py").is_file() for folder in folders), sorted(map(str, folders))


def test_every_lane_names_a_test_module():
    from tests.conftest import LANES

    here = Path(__file__).resolve().parent
    assert [name for name in LANES if not (here / f"{name}.py").is_file()] == []  # a renamed module keeps its lane


def test_no_drafter_or_rule_is_named_outside_its_module_and_the_registries():
    """A drafter or rule lives in one place (its module and its registry line): no other module names one in a
    string, nor the lesson player's template (pages, renderers, records and analyses read the registry entries; a
    name a module needs, e.g. the draft-model drafter a sweep runs, is the registry's constant)."""
    from specviz.drafters.registry import DRAFTERS
    from specviz.rules.registry import RULES

    names, own = set(DRAFTERS) | set(RULES), {PACKAGE / "drafters", PACKAGE / "rules"}
    named = [
        f"{path.relative_to(ROOT)}:{found}"
        for path in MODULES.values()
        if path.parent not in own
        for found in strings_in(path, names)
    ]
    quoted = re.compile("[\"'`](" + "|".join(map(re.escape, names)) + ")[\"'`]")
    named += [
        f"{page.relative_to(ROOT)}: {m[0]}"
        for page in PACKAGE.rglob("*.html")
        for m in quoted.finditer(page.read_text())
    ]
    assert named == []


def test_no_rule_class_is_named_outside_its_module_and_the_registry():
    """A rule's class is reached through its registry entry (``rule_for``, ``entry.build``) and the ``Rule`` protocol:
    no module but its own and the rule registry names it (an import, a base class, a call), so a new rule is its
    module and one registry line, and the engine, Compare rules and the lab ask the rule, never its type."""
    from specviz.config import DecodeConfig
    from specviz.rules.registry import RULE_ENTRIES

    classes = {type(entry.build(DecodeConfig(rule=entry.name))) for entry in RULE_ENTRIES}
    assert len(classes) == len(RULE_ENTRIES)  # one class per rule
    registry = PACKAGE / "rules" / "registry.py"
    named = [
        f"{path.relative_to(ROOT)}: {cls.__name__}"
        for cls in classes
        for name, path in MODULES.items()
        if name != cls.__module__ and path != registry and cls.__name__ in identifiers_in(path)
    ]
    assert named == []


def identifiers_in(path: Path) -> set[str]:
    """Every name ``path`` imports, reads or reaches as an attribute."""
    return {
        getattr(node, "id", None) or getattr(node, "attr", None) or getattr(node, "name", "")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, (ast.Name, ast.Attribute, ast.alias))
    }


def strings_in(path: Path, names: set[str]) -> list[str]:
    """Where ``path`` writes one of ``names`` as a string ("line 'name'"), except as a progress bar's ``unit=``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    units = {id(k.value) for k in ast.walk(tree) if isinstance(k, ast.keyword) and k.arg == "unit"}
    return [
        f"{node.lineno} {node.value!r}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and node.value in names and id(node) not in units
    ]
