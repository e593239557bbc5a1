"""The house rules, checked on the source: no import cycles (those under ``TYPE_CHECKING`` included), no arrow
from the config up into the rules or drafters, the runtime a package of its own that the engine reaches only through
the forward protocol, one package per feature (nothing loose at the top), streamlit only in the UI, no test leaning on
the benchmarks, every page listed once. A module is as
long as its idea: past :data:`MODULE_LINES_SOFT` lines the check warns (it does not fail)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import warnings
from pathlib import Path

from specviz.ui.navigation import PAGES

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "specviz"
MODULE_LINES_SOFT = 600  # a warning far above a typical module (about 150 lines), never a failure


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


def imported_modules(path: Path, type_checking: bool = False) -> set[str]:
    """Every specviz module ``path`` imports, at the top or deferred inside a function (a deferred import
    hides a cycle from Python, not from this check), with the packages whose ``__init__`` each runs (except
    the importer's own packages, which Python has begun to initialise before the importer runs). Imports under
    ``if TYPE_CHECKING:`` count only with ``type_checking``: they never run, but a reader (and the type checker)
    follows them all the same."""
    own = module_name(path).split(".")
    own_packages = {".".join(own[:i]) for i in range(1, len(own) + 1)}
    found = set()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree if type_checking else without_type_checking(tree)):
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


def test_the_package_has_no_import_cycles_even_through_type_checking_imports():
    graph = {name: imported_modules(path, type_checking=True) - {name} for name, path in MODULES.items()}
    assert cycles(graph) == []


def test_the_config_imports_nothing_from_the_rules_or_drafters():
    """The registries and settings groups are data below the config (:mod:`specviz.registry`); the torch-heavy
    packages sit above it and import it, never the other way."""
    upward = {
        name
        for name in imported_modules(MODULES["specviz.config"], type_checking=True)
        if name.split(".")[:2] in (["specviz", "rules"], ["specviz", "drafters"])
    }
    assert len(upward) == 0, upward


def test_the_registries_import_no_model_code():
    for name, path in MODULES.items():
        if name.startswith("specviz.registry"):
            assert not {m for m in imported_modules(path) if m.split(".")[1] in ("rules", "drafters", "models")}, name


RUNTIME_MAY_IMPORT = ("specviz.runtime", "specviz.cache", "specviz.settings", "specviz.limits")
TOP_LEVEL = {"specviz.__main__", "specviz.cache", "specviz.config", "specviz.limits", "specviz.settings"}


def test_the_runtime_is_a_package_of_its_own():
    """:mod:`specviz.runtime` runs passes and knows nothing of the lesson: it imports only itself and the leaves
    below everything (the cache directory, the settings' errors, the limits)."""
    outside = {
        (name, imported)
        for name, path in MODULES.items()
        if name.startswith("specviz.runtime")
        for imported in imported_modules(path, type_checking=True)
        if not imported.startswith(RUNTIME_MAY_IMPORT)
    }
    assert not outside, outside


def test_the_engine_reaches_the_runtime_only_through_the_forward_protocol():
    """The engine and the rules import the runtime's package (its protocol and the reference forwards), never a
    module behind it: the CPU integer runtime, a kernel, the Llama math."""
    from specviz import runtime

    behind = {
        (name, imported)
        for name, path in MODULES.items()
        if name.startswith(("specviz.engine", "specviz.rules"))
        for imported in imported_modules(path, type_checking=True)
        if imported.startswith("specviz.runtime.")
    }
    assert not behind, behind
    assert {"ForwardFn", "StatesForwardFn", "KVCachedSequence", "TreeLayout", "full_forward"} <= set(runtime.__all__)


def test_nothing_but_the_leaves_sits_loose_at_the_top():
    """A feature is a package (the command line is :mod:`specviz.cli`, the serving engines' reports
    :mod:`specviz.server_reports`); only the config, its settings and limits and the cache directory sit at the top."""
    loose = {name for name, path in MODULES.items() if name.count(".") == 1 and path.name != "__init__.py"}
    assert loose == TOP_LEVEL


def test_no_test_imports_the_benchmarks():
    """A benchmark measures the package; a test never leans on one (what both need lives in the package)."""
    leaning = {
        path.name
        for path in (ROOT / "tests").glob("*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ImportFrom)
        and (node.module or "").split(".")[0] == "benchmarks"
        or isinstance(node, ast.Import)
        and any(a.name.split(".")[0] == "benchmarks" for a in node.names)
    }
    assert not leaning, leaning


def test_the_c_kernels_are_bound_in_one_module():
    """The kernels' sources are compiled and bound by :mod:`specviz.runtime.cpu.compiled` alone."""
    naming = {name for name, path in MODULES.items() if "CDLL(str(library" in path.read_text(encoding="utf-8")}
    assert naming == {"specviz.runtime.cpu.compiled"}
    assert {p.name for p in (PACKAGE / "runtime" / "cpu").glob("*.c")} == {
        "int4_rows.c",
        "row_attention.c",
        "int4_layer.c",
        "kernels_layout.c",
    }


def test_the_cycle_check_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_long_modules_are_only_warned_of():
    long = {name: n for name, path in MODULES.items() if (n := len(path.read_text().splitlines())) > MODULE_LINES_SOFT}
    if long:
        warnings.warn(f"modules past {MODULE_LINES_SOFT} lines (split by idea, not by count): {long}", stacklevel=1)


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
    assert sorted(listed) == sorted(p.stem for p in (ROOT / "pages").glob("*.py"))  # `streamlit run app.py`'s pages
    assert len(set(listed)) == len(listed) and len({p.title for p in PAGES}) == len(PAGES)
    assert all(p.icon.startswith(":material/") for p in PAGES)  # no emoji font needed


def statements_after_the_docstring(path: Path) -> list[str]:
    body = ast.parse(path.read_text(encoding="utf-8")).body
    return [
        ast.unparse(node) for node in body if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))
    ]


def test_the_top_level_scripts_only_start_the_packaged_code():
    """The card's top level (``app.py``, ``pages/``) holds no page code: each file starts the package's, so a page
    is written once and the wheel's ``specviz app`` serves the same code."""
    assert statements_after_the_docstring(ROOT / "app.py") == [
        "import streamlit as st",
        "from specviz.ui.app import main",
        "from specviz.ui.nested_paths import MIDDLEWARE",
        "if __name__ == '__main__':\n    main()\nelse:\n    app = st.App(__file__, middleware=MIDDLEWARE)",
    ]  # streamlit runs it as __main__ for each page run, and imports it once to find its server, `app`
    for page in (ROOT / "pages").glob("*.py"):
        assert statements_after_the_docstring(page) == [
            "from specviz.ui.navigation import run_page",
            "run_page(__file__)",
        ], page.name


def test_the_app_options_are_streamlits_own_file_and_the_packaged_one():
    """Streamlit reads ``.streamlit/config.toml`` in the directory ``streamlit run app.py`` starts in; the package
    carries the same file (a link to it) for ``specviz app``, which passes it as flags."""
    from specviz.serving.processes import STREAMLIT_OPTIONS, streamlit_flags

    assert STREAMLIT_OPTIONS.resolve() == (ROOT / ".streamlit" / "config.toml").resolve()
    assert "--runner.postScriptGC=false" in streamlit_flags() and "--client.showErrorDetails=none" in streamlit_flags()
    read = "import streamlit.config as c; print(c.get_option('runner.postScriptGC'), c.get_option('server.headless'))"
    started_here = subprocess.run([sys.executable, "-c", read], cwd=ROOT, capture_output=True, text=True, check=True)
    assert started_here.stdout.split() == ["False", "True"]  # what a plain `streamlit run app.py` here runs with


def test_the_session_state_is_touched_in_one_module_with_every_key_listed():
    """``specviz/ui/state.py`` is the one module that names ``session_state``; its keys are the app's own (one
    prefix, never a config field's name, which keys that field's widget) and each is listed once."""
    from specviz.config import field_params
    from specviz.ui.state import PREFIX, SESSION_KEYS

    touching = {name for name, path in MODULES.items() if "session_state" in path.read_text(encoding="utf-8")}
    assert touching == {"specviz.ui.state"}
    assert all(key.startswith(PREFIX) for key in SESSION_KEYS) and len(set(SESSION_KEYS)) == len(SESSION_KEYS)
    assert not set(SESSION_KEYS) & set(field_params())
    widget_keys = [
        node.value.value
        for path in MODULES.values()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.keyword) and node.arg in ("key", "button_key") and isinstance(node.value, ast.Constant)
    ]
    assert widget_keys == [], "a widget's key comes from specviz.ui.state (Session or page_key), not a literal"


def test_every_package_folder_is_a_regular_package():
    folders = {p.parent for p in PACKAGE.rglob("*.py")} - {PACKAGE / "ui" / "pages"}  # scripts streamlit runs
    assert all((folder / "__init__.py").is_file() for folder in folders), sorted(map(str, folders))


def test_every_test_module_outside_the_fast_lane_says_so_itself():
    """A module of browser, Redis or published-pair tests marks itself (``pytestmark``) slow, so the fast lane
    (``pytest -m "not slow"``) leaves it out by its own word, not by a list kept elsewhere."""
    for path in (ROOT / "tests").glob("test_*.py"):
        text = path.read_text(encoding="utf-8")
        for lane in ("browser", "redis", "published"):
            if f"pytest.mark.{lane}" in text:
                assert "pytest.mark.slow" in text, (path.name, lane)
        if "chromium_page" in text or "sync_playwright" in text:
            assert "pytest.mark.browser" in text, path.name


RUNS_THE_APP_OR_THE_EMBEDDED_PAIR = re.compile(r"\bmake_app\(|\bAppTest\b|load_model\(\"embedded\"|\bEMBEDDED\b")
EMBEDDED_FIXTURES = frozenset({"embedded", "measured_machine"})


def marked_slow(node: ast.FunctionDef | ast.Module) -> bool:
    """Whether a test function's decorators, or a module's ``pytestmark``, put it in the slow lane."""
    if isinstance(node, ast.Module):
        marks = [n.value for n in node.body if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == "pytestmark"]
    else:
        marks = node.decorator_list
    return any("pytest.mark.slow" in ast.unparse(mark) for mark in marks)


def module_functions(path: Path) -> dict[str, tuple[str, frozenset[str]]]:
    """A test module's top-level functions (tests, fixtures, helpers): name -> (source text, argument names)."""
    source = path.read_text(encoding="utf-8")
    return {
        node.name: (ast.get_source_segment(source, node) or "", frozenset(a.arg for a in node.args.args))
        for node in ast.parse(source).body
        if isinstance(node, ast.FunctionDef)
    }


def runs_the_app_or_the_embedded_pair(text: str, arguments: frozenset[str], helpers: frozenset[str]) -> bool:
    """Whether a function (its source ``text`` and ``arguments``) runs the app (AppTest: its first run measures this
    machine's defaults for the embedded pair, a minute or more) or loads the embedded pair: itself, or through one of
    ``helpers`` (fixtures or functions that do, called or requested)."""
    called = helpers and re.search(rf"\b({'|'.join(map(re.escape, helpers))})\(", text)
    return bool(RUNS_THE_APP_OR_THE_EMBEDDED_PAIR.search(text) or arguments & (EMBEDDED_FIXTURES | helpers) or called)


def imported_from_tests(path: Path) -> dict[str, str]:
    """The names a test module imports from its sibling modules (``from .test_app import make_app``): name -> module."""
    return {
        alias.asname or alias.name: node.module
        for node in ast.parse(path.read_text(encoding="utf-8")).body
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module
        for alias in node.names
    }


def app_or_embedded_pair_tests(paths: list[Path]) -> list[tuple[Path, str]]:
    """The tests of ``paths`` (module path, test name) that run the app or load the embedded pair, through a fixture
    or helper of their module, or one it imports from a sibling module, too."""
    modules = {path.stem: (path, module_functions(path), imported_from_tests(path)) for path in paths}
    heavy: set[tuple[str, str]] = set()  # (module, function) known to run the app or load the embedded pair

    def helpers_of(module: str) -> frozenset[str]:
        imported = modules[module][2]
        return frozenset(name for (owner, name) in heavy if owner == module or imported.get(name) == owner)

    while grown := {
        (module, name)
        for module, (_, functions, _) in modules.items()
        for name, (text, arguments) in functions.items()
        if (module, name) not in heavy and runs_the_app_or_the_embedded_pair(text, arguments, helpers_of(module))
    }:
        heavy |= grown
    return sorted((modules[module][0], name) for module, name in heavy if name.startswith("test_"))


def test_the_fast_lane_neither_runs_the_app_nor_loads_the_embedded_pair():
    """The fast lane (``pytest -m "not slow"``) is the logic on tiny models built from configs, under five minutes
    on a fresh clone: a test that runs the app or loads the embedded pair (on a fresh clone: de-quantising it and
    measuring this machine, minutes on 2 cores) is marked slow, by its module or itself."""
    paths = [path for path in sorted((ROOT / "tests").glob("test_*.py")) if path != Path(__file__)]
    modules = {path: ast.parse(path.read_text(encoding="utf-8")) for path in paths}
    tests = {
        (path, n.name): n for path, module in modules.items() for n in module.body if isinstance(n, ast.FunctionDef)
    }
    unmarked = [
        f"{path.name}::{name}"
        for path, name in app_or_embedded_pair_tests(paths)
        if not marked_slow(modules[path]) and not marked_slow(tests[path, name])
    ]
    assert unmarked == [], unmarked


def test_no_drafter_or_rule_is_named_outside_its_module_and_the_registries():
    """A drafter or rule lives in one place (its module and its registry line): no other module names one in a
    string, nor the lesson player's template (pages, renderers, records and analyses read the registry entries; a
    name a module needs, e.g. the draft-model drafter a sweep runs, is the registry's constant)."""
    from specviz.registry.drafters import DRAFTERS
    from specviz.registry.rules import RULES

    names, own = set(DRAFTERS) | set(RULES), {PACKAGE / "drafters", PACKAGE / "rules", PACKAGE / "registry"}
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
    from specviz.registry.rules import RULE_ENTRIES

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


def doc_page_table() -> dict[str, list[str]]:
    """docs/architecture.md's "Adding a page" table: each page script and the analysis modules it names."""
    section = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8").split("## Adding a page")[1]
    rows = [line.split("|")[1:3] for line in section.split("## ")[0].splitlines() if line.startswith("| ")][1:]
    pages: dict[str, list[str]] = {}
    for scripts, computation in rows:
        for script in scripts.split(","):
            pages[script.strip()] = re.findall(r"\b[a-z_]+\b", computation.split(":")[0])
    return pages


def test_the_add_a_page_walk_holds_for_every_page():
    """docs/architecture.md's walk for a page, checked on every page there is: its script in specviz/ui/pages/ and
    one PageEntry (the top-level two-liner: test_the_top_level_scripts_only_start_the_packaged_code), a row in the
    doc's table naming its computation in specviz/analysis/ or its feature's package (a module that exists, or none),
    and its first call ``ui.shared_controls()`` before anything is drawn; widget keys from page_key are checked
    above."""
    table = doc_page_table()
    assert sorted(table) == sorted(p.script for p in PAGES)  # every page has its row, and no row a missing page
    analysis = {p.stem for folder in ("analysis", "server_reports") for p in (PACKAGE / folder).glob("*.py")}
    named = {script: [m for m in modules if m in analysis] for script, modules in table.items()}
    assert [s for s, modules in table.items() if modules[:1] != ["none"] and not named[s]] == []

    def reads_its_link(call: str) -> bool:  # before the sidebar rewrites the URL (the doc says so)
        return call == "ui.linked_round()" or call.startswith("st.query_params.")

    for page in PAGES:
        body = ast.parse((PACKAGE / "ui" / "pages" / f"{page.script}.py").read_text(encoding="utf-8")).body
        called = [n.value for n in body if isinstance(n, (ast.Assign, ast.Expr)) and isinstance(n.value, ast.Call)]
        first = next(call for call in map(ast.unparse, called) if not reads_its_link(call))
        assert first == "ui.shared_controls()", (page.script, first)
