"""Every ``specviz.x.y`` a docstring or comment names (and every :func:/:class:/:mod:/:meth:/:data: reference to
one) exists: a reader who follows a reference finds what it names. Resolved on the source (no imports): the
longest prefix that is a module, then names defined at its top level, then inside that class."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "specviz"
DOTTED = re.compile(r"(?<![\w/.])specviz(?:\.[A-Za-z_][A-Za-z0-9_]*)+")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


def defined(body: list[ast.stmt]) -> dict[str, ast.AST]:
    """The names a module's or class's body defines (classes, functions, assignments, imports)."""
    names: dict[str, ast.AST] = {}
    for node in body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            names[node.name] = node
        elif isinstance(node, ast.Assign):
            names.update({t.id: node for t in node.targets if isinstance(t, ast.Name)})
            names.update(
                {
                    e.id: node
                    for t in node.targets
                    if isinstance(t, ast.Tuple)
                    for e in t.elts
                    if isinstance(e, ast.Name)
                }
            )
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = node
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update({(a.asname or a.name).split(".")[0]: node for a in node.names})
        elif isinstance(node, ast.If):
            names.update(defined(node.body))
    return names


def resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        module = ".".join(parts[:cut])
        if module in MODULES:
            break
    else:
        return False
    rest = parts[cut:]
    if not rest:
        return True
    scope = defined(ast.parse(MODULES[module].read_text(encoding="utf-8")).body)
    for i, name in enumerate(rest):
        if name not in scope:
            return False
        node = scope[name]
        if i + 1 < len(rest):
            if not isinstance(node, ast.ClassDef):
                return i + 1 == len(rest)  # an attribute of a value: not checked further
            scope = defined(node.body)
    return True


def named_in_source() -> list[tuple[str, str]]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")) + sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]:
        text = path.read_text(encoding="utf-8")
        for m in DOTTED.finditer(text):
            name = m[0].rstrip(".")
            found.append((f"{path.relative_to(ROOT)}:{text[: m.start()].count(chr(10)) + 1}", name))
    return found


def test_every_dotted_specviz_name_names_something_that_exists():
    missing = [f"{where} {name}" for where, name in named_in_source() if not resolves(name)]
    assert missing == []


def test_the_resolver_finds_what_exists_and_misses_what_does_not():
    assert resolves("specviz.config.DecodeConfig.settings")
    assert resolves("specviz.registry.rules")
    assert not resolves("specviz.ui.lecture")
    assert not resolves("specviz.config.NoSuchSetting")
