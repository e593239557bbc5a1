"""The decoding configuration: one frozen record, validated in one place.

Every entry point (CLI, app, URL query parameters, a lecture file) builds a :class:`DecodeConfig` and calls
:meth:`DecodeConfig.validated`, so a bad value always meets the same clear message; a config is checked once, where
it is built, and the engine trusts one that was.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from specviz import limits
from specviz.registry.drafter_settings import TreeShape
from specviz.registry.drafters import DRAFTERS, drafter_entry, settings_groups
from specviz.registry.rule_settings import RuleSettings
from specviz.registry.rules import RULES
from specviz.registry.shared_settings import SharedSettings
from specviz.settings import Param, SelfChecking, check, check_described, choosing, described_fields

G = TypeVar("G")  # a drafter's settings group


@dataclass(frozen=True, init=False)
class DecodeConfig(SharedSettings):
    """Everything that determines a trace (together with the prompt): the shared settings and the rules' (the
    :class:`SharedSettings` it extends) and each registered drafter's settings group (``groups``, read with
    :meth:`settings`). Each setting carries its :class:`Param`, by a flat name (:func:`field_params`): the CLI's
    options, the URL parser and the sidebar's widgets are made from them."""

    groups: tuple[Any, ...] = dataclasses.field(default=())  # each registered drafter's settings

    def __init__(self, **values: Any) -> None:
        """A config from flat setting names (shared fields and every drafter group's), the rest at defaults."""
        own = {f.name: f for f in dataclasses.fields(self) if f.name != "groups"}
        groups: dict[type, dict[str, Any]] = {group: {} for group in settings_groups()}
        owners = {name: group for group in groups for name in described_fields(group)}
        for name, value in values.items():
            if name in owners:
                groups[owners[name]][name] = value
            elif name not in own:
                raise TypeError(f"DecodeConfig has no setting {name!r}")
        for name, f in own.items():
            object.__setattr__(self, name, values.get(name, f.default))
        object.__setattr__(self, "groups", tuple(group(**given) for group, given in groups.items()))

    def settings(self, group: type[G]) -> G:
        """This config's settings group ``group``, the one way to read one: a drafter's (from
        :mod:`specviz.registry.drafter_settings`; its defaults where the config was made before the group's drafter
        was registered) or a rule's (from :mod:`specviz.registry.rule_settings`: flat fields this config extends)."""
        held = next((g for g in self.groups if type(g) is group), None)
        if held is not None:
            return held
        if isinstance(self, group):  # a rule's group: the config's own fields
            return group(**{name: getattr(self, name) for name in described_fields(cast(type, group))})
        return group()

    def value(self, name: str) -> Any:
        """A setting by its flat name (a shared field or a group's)."""
        if name in described_fields(DecodeConfig):  # a shared setting: no group to look up
            return getattr(self, name)
        owner = next((g for g in settings_groups() if name in described_fields(g)), None)
        return getattr(self.settings(owner) if owner else self, name)

    def validated(self) -> DecodeConfig:
        """Return self if every setting is in range, else raise :class:`ConfigError`. Checked once per config: the
        boundary that builds it from user input validates it, and the engine's own call then trusts it (a config made
        in code, e.g. by :meth:`replace`, is checked when the engine first meets it)."""
        if self.__dict__.get("_valid"):
            return self
        for name, described in field_params().items():
            check_described(name, self.value(name), described)
        check(bool(str(self.target).strip()), "target model must not be empty")
        check(
            drafter_entry(self.drafter).draft_model != "always" or bool(self.draft_spec),
            f"drafter {self.drafter!r} needs a draft model (--draft); only the embedded target has a built-in one",
        )
        for group in self.groups:
            if isinstance(group, SelfChecking):
                group.validate()
            nodes = group.tree_nodes(self.tree_depth) if isinstance(group, TreeShape) else 0
            limit = limits.TREE_NODES_MAX
            check(nodes <= limit, f"a draft tree would have {nodes} nodes; the limit is {limit}")
        object.__setattr__(self, "_valid", True)
        return self

    @property
    def draft_spec(self) -> str | None:
        """The draft model a run on this config loads (None: none), by its drafter's registry entry: the one named
        for a drafter that drafts with one ("always"; "if named": trees without a named draft use the layer-skip
        self-draft), else the shipped embedded draft for the embedded target's drafters that draft with one
        ("always", and "if any": the suffix drafter's chain joins where there is a draft model)."""
        named = str(self.draft).strip() if self.draft and str(self.draft).strip() else None
        uses = drafter_entry(self.drafter).draft_model if self.drafter in DRAFTERS else "never"
        if uses in ("always", "if any"):
            return named or (limits.EMBEDDED_DRAFT if self.target == limits.EMBEDDED else None)
        return named if uses == "if named" else None

    @property
    def draft_precision(self) -> str:
        """The precision the draft model runs in: its own where set, else the target's."""
        return self.draft_dtype or self.dtype

    def replace(self, **changes: Any) -> DecodeConfig:
        return DecodeConfig(**{**self.flat(), **changes})

    def flat(self) -> dict[str, Any]:
        """Every setting by its flat name, as held (tuples stay tuples)."""
        return {name: self.value(name) for name in field_params()}

    def to_dict(self) -> dict[str, Any]:
        """Every setting by its flat name, JSON-ready (the trace files' ``config``)."""
        return {name: list(v) if isinstance(v, tuple) else v for name, v in self.flat().items()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> DecodeConfig:
        kinds = {name: p.kind for name, p in field_params().items()}
        return cls(
            **{k: tuple(v) if isinstance(v, list) and kinds.get(k, "").startswith("tuple") else v for k, v in d.items()}
        )


def field_params() -> dict[str, Param]:
    """Every setting's :class:`Param` by its flat name: the shared fields, each registered drafter's group after
    ``draft_vocab`` (so the sidebar draws them with the models) and the rules' after ``gamma``; the drafter and rule
    choices from the registries."""
    return _field_params(settings_groups(), tuple(DRAFTERS), tuple(RULES))


@functools.cache
def _field_params(groups: tuple[type, ...], drafters: tuple[str, ...], rule_names: tuple[str, ...]) -> dict[str, Param]:
    shared = dict(described_fields(DecodeConfig))
    shared["drafter"], shared["rule"] = choosing(shared["drafter"], DRAFTERS), choosing(shared["rule"], RULES)
    own = {name: p for group in groups for name, p in described_fields(group).items()}
    check(not own.keys() & shared.keys(), f"a drafter's setting takes a shared name: {own.keys() & shared.keys()}")
    rules = list(described_fields(RuleSettings))  # the rule and what it reads, after the block size
    order = [n for n in shared if n not in rules]
    at, gamma = order.index("draft_vocab") + 1, order.index("gamma") + 1
    return {
        **{n: shared[n] for n in order[:at]},
        **own,
        **{n: shared[n] for n in order[at:gamma] + rules + order[gamma:]},
    }


def field_type(name: str) -> str:
    """The setting's annotation as written, e.g. "int", "float", "str | None", "tuple[int, ...] | None"."""
    return field_params()[name].kind
