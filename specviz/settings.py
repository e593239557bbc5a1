"""How a setting describes itself, and the checks that follow from the description (no model code, no specviz
imports): the shared :class:`~specviz.config.DecodeConfig` fields and each drafter's settings group
(:mod:`specviz.registry.drafter_settings`) are dataclasses whose fields carry a :class:`Param`; the CLI's options,
the URL parser, the sidebar's widgets and the validation are all made from these."""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, Self, TypeVar, runtime_checkable

G = TypeVar("G")  # a settings group


class ConfigError(ValueError):
    """A configuration value is out of range or malformed; the message names the field."""


class ModelLoadError(RuntimeError):
    """A model spec could not be turned into a model; the message says which and why."""


class VocabularyMismatchError(ValueError):
    """Draft and target do not map tokens to the same ids, so a draft token means nothing to the target."""


@dataclass(frozen=True)
class Param:
    """How a setting describes itself: its checks, its sidebar widget, its CLI flag, its URL parameter.

    ``low``/``high`` bound the value (``low_open``: low itself excluded); ``shown`` narrows the widget's
    range where the valid range is wider than a slider should be. ``widget`` "none": the page draws
    it (the model pair) or nobody does (device, top_n). ``when``: the widget is enabled only while
    another field has this value. Drafter and rule widgets are enabled by their registry entries.
    ``kind``: the field's annotation as written ("int", "float", "str | None", "tuple[int, ...] | None"),
    filled in by :func:`described_fields`.
    """

    label: str
    help: str = ""
    widget: str = "slider"  # slider | radio | select | number | text | checkbox | none
    section: str = "Verification"  # Models | Verification | Prompt
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    shown: tuple[float, float] | None = None
    step: float | None = None
    choices: tuple[Any, ...] = ()
    choice_labels: tuple[str, ...] = ()
    when: tuple[str, Any] | None = None
    url: bool = True
    cli: bool = True
    kind: str = ""


@runtime_checkable
class SelfChecking(Protocol):
    """A settings group whose values must also hold together (beyond each Param's own range)."""

    def validate(self) -> None:
        """Raise :class:`ConfigError` where they do not."""
        ...


def param(default: Any, **described: Any) -> Any:
    """A dataclass field with its :class:`Param` (typed ``Any`` so it stands for any field's default)."""
    return dataclasses.field(default=default, metadata={"param": Param(**described)})


def annotation(kind: object) -> str:
    """An annotation as written ("int", "str | None"), whether the module postponed it (a string) or not."""
    return kind if isinstance(kind, str) else getattr(kind, "__name__", None) or str(kind)


@functools.cache
def described_fields(cls: type) -> dict[str, Param]:
    """The fields of a settings dataclass that carry a :class:`Param`, in order, each with its annotation (one
    dict per class, shared: copy it before changing it)."""
    return {
        f.name: dataclasses.replace(f.metadata["param"], kind=annotation(f.type))
        for f in dataclasses.fields(cls)
        if "param" in f.metadata
    }


class Choice(Protocol):
    """A registry entry offered as a choice."""

    @property
    def label(self) -> str: ...

    @property
    def help(self) -> str: ...


class Configured(Protocol):
    """A configuration as the registries read it (:class:`~specviz.config.DecodeConfig` is one): the config
    validates its names against the registries, so they see it through these few members, never its class."""

    @property
    def draft_spec(self) -> str | None: ...

    @property
    def tree_depth(self) -> int: ...

    def value(self, name: str) -> Any: ...

    def settings(self, group: type[G]) -> G: ...

    def replace(self, **changes: Any) -> Self: ...


def choosing(described: Param, entries: Mapping[str, Choice]) -> Param:
    """A choice among registry entries: their names, labels, and each one's help after the field's own."""
    return dataclasses.replace(
        described,
        choices=tuple(entries),
        choice_labels=tuple(e.label for e in entries.values()),
        help=described.help + ": " + " · ".join(f"{e.label}: {e.help}" for e in entries.values()),
    )


def check(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


def is_number(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def check_described(name: str, value: Any, described: Param) -> None:
    """The checks a field's Param implies: its choices, or its numeric range (None passes where the annotation
    allows it)."""
    if value is None and "None" in described.kind:
        return
    if described.choices and isinstance(value, str):
        named = ", ".join(str(c) for c in described.choices if c is not None)
        check(value in described.choices, f"{name} must be one of {named}; got {value!r}")
    elif described.low is None or described.high is None:
        return
    elif isinstance(described.low, int) and isinstance(described.high, int):
        ok = isinstance(value, int) and not isinstance(value, bool) and described.low <= value <= described.high
        check(ok, f"{name} must be an integer in [{described.low}, {described.high}]; got {value!r}")
    elif described.low_open:
        check(
            is_number(value) and described.low < value <= described.high,
            f"{name} must be in ({described.low:g}, {described.high:g}]; got {value!r}",
        )
    else:
        ok = is_number(value) or (value == math.inf and described.high == math.inf)
        check(
            ok and described.low <= value <= described.high,
            f"{name} must be a number in [{described.low}, {described.high}]; got {value!r}",
        )
