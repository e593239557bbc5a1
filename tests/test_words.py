"""The field's words (docs/architecture.md, "Glossary"): the words the project retired stay retired in code, pages and
docs, and every ``build(...)`` a docstring or a doc names has the signature of a ``build`` the package defines (the
rule and drafter module protocols', a registry entry's), so a reader never follows a stale one."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from specviz.drafters.base import DrafterModule
from specviz.registry.drafters import DrafterEntry
from specviz.registry.rules import RuleEntry
from specviz.rules.acceptance import RuleModule

ROOT = Path(__file__).resolve().parent.parent
RETIRED = {  # a retired word -> the glossary's word for it
    r"(?<![a-z])(un)?pric(e|es|ed|ing)(?![a-z])": "predicted speedup (the theory's) or estimate (a work's seconds)",
    r"\bexact to itself\b": "batch-invariant",
    r"\blean (step|body|forward)\b": "direct Llama body",
    r"\bdisturbed\b": "under load (noisy)",
    r"\bpeer[ _]passes\b": "llama.cpp's passes",
    r"\bfirst[ _-]paints?\b": "first contentful paint",
    r"\brace'?s? verdicts?\b|\.verdicts\b": "agreement (a race's); verdict is a rule's accept/reject only",
    r"\bmax_block\b|\bblock_size\b": "gamma",
}
GLOSSARY_ROW = re.compile(r"^\| \*\*")  # the glossary names the retired words in its own table rows


def written_files() -> list[Path]:
    """The code, pages and docs a reader meets: the package (its data, prompt text, left out), the top-level scripts,
    the benchmarks, the tests, the README and docs/."""
    files = [ROOT / "app.py", ROOT / "README.md", *(ROOT / "pages").glob("*.py"), *(ROOT / "docs").glob("*.md")]
    for folder in ("specviz", "benchmarks", "tests"):
        files += [
            p for p in (ROOT / folder).rglob("*") if p.suffix in (".py", ".html", ".md") and "data" not in p.parts
        ]
    return [p for p in files if p.is_file() and p.name != Path(__file__).name]


def retired_uses(text: str) -> list[tuple[int, str]]:
    """(line number, the retired word) for every use in ``text``, the glossary's own rows left out."""
    return [
        (number, match.group(0))
        for number, line in enumerate(text.splitlines(), start=1)
        if not GLOSSARY_ROW.match(line)
        for pattern in RETIRED
        for match in re.finditer(pattern, line, flags=re.IGNORECASE)
    ]


def test_no_retired_word_is_written_anywhere():
    found = {
        f"{path.relative_to(ROOT)}:{number}": word
        for path in written_files()
        for number, word in retired_uses(path.read_text(encoding="utf-8"))
    }
    assert found == {}, f"retired words (see the glossary in docs/architecture.md): {found}"


def test_the_retired_word_check_finds_each_word_and_spares_the_glossary():
    assert [word for _, word in retired_uses("the speedup is priced at 1.4x\nexact to itself")] == [
        "priced",
        "exact to itself",
    ]
    assert retired_uses("| **batch-invariant** | ... | exact to itself |") == []
    assert retired_uses("the predicted speedup; a rule's verdict; an estimate; a prickly plant") == []
    assert [word for _, word in retired_uses("def test_a_lane_priced_from_a_profile")] == ["priced"]  # in a name too


def build_signatures() -> dict[str, set[tuple[str, ...]]]:
    """Every ``build`` the package defines, by what a reader would write before it ("" for a module's ``build``,
    whose protocols are :class:`RuleModule` and :class:`DrafterModule`): its parameters' names, ``self`` left out."""

    def names(function: object) -> tuple[str, ...]:
        return tuple(n for n in inspect.signature(function).parameters if n != "self")  # type: ignore[arg-type]

    return {
        "": {names(RuleModule.build), names(DrafterModule.build)},
        "RuleEntry.": {names(RuleEntry.build)},
        "DrafterEntry.": {names(DrafterEntry.build)} if hasattr(DrafterEntry, "build") else set(),
    }


BUILD_MENTION = re.compile(r"(?<![\w_])((?:RuleEntry|DrafterEntry)\.)?build\(([a-z_, ]*)\)")


def stale_builds(text: str, signatures: dict[str, set[tuple[str, ...]]]) -> list[str]:
    """Each ``build(a, b)`` (or ``RuleEntry.build(a)``) in ``text`` whose arguments are no signature of its kind;
    a bare ``.build(...)`` call in code is read as what it is (a call, not a description) and left out."""
    stale = []
    for match in BUILD_MENTION.finditer(text):
        if text[max(0, match.start() - 1)] == "." and not match.group(1):
            continue  # a call on an object in code: its arguments are checked by mypy
        arguments = tuple(a.strip() for a in match.group(2).split(",") if a.strip())
        if arguments not in signatures.get(match.group(1) or "", set()):
            stale.append(match.group(0))
    return stale


def docstrings_and_docs() -> dict[str, str]:
    """The package's docstrings and comments (its source, ``def`` lines left out) and docs/, by file."""
    texts = {}
    for path in (ROOT / "specviz").rglob("*.py"):
        source = path.read_text(encoding="utf-8")
        texts[str(path.relative_to(ROOT))] = "\n".join(line for line in source.splitlines() if "def build" not in line)
    for path in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]:
        texts[str(path.relative_to(ROOT))] = path.read_text(encoding="utf-8")
    return texts


def test_every_build_a_docstring_names_has_the_protocols_signature():
    signatures = build_signatures()
    assert ("settings",) in signatures[""] and len(signatures[""]) == 2
    stale = {name: found for name, text in docstrings_and_docs().items() if (found := stale_builds(text, signatures))}
    assert stale == {}


@pytest.mark.parametrize(
    "text, stale",
    [
        ("the module's ``build(config)``", ["build(config)"]),
        ("``build(settings)`` from its own group", []),
        ("``build(settings, shared, pair)``: three of four", ["build(settings, shared, pair)"]),
        ("`RuleEntry.build(config)`", []),
        ("`RuleEntry.build(settings)`", ["RuleEntry.build(settings)"]),
    ],
)
def test_the_build_check_tells_a_stale_signature(text, stale):
    assert stale_builds(text, build_signatures()) == stale
