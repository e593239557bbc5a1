"""One entry per verification rule: the only list of them in the code.

The CLI's choices, the sidebar's radios and their help, the URL parser, the config's validation, the round view's
labels, the Compare rules page, the lesson player and the pages' statements of alpha all read these entries; the
engine builds a run's rule from one. A rule is in one place: its module in :mod:`specviz.rules` (its class, meeting
the :class:`~specviz.rules.acceptance.Rule` protocol, and ``build(settings)``: the
:class:`~specviz.rules.acceptance.RuleModule` protocol), its settings group in
:mod:`specviz.registry.rule_settings` if it
has settings, and one :class:`RuleEntry` line below; :func:`register` adds one at run time (a test's toy rule).

Modules are named as strings and imported on first use, so this module (and :mod:`specviz.config`, which validates
names against it) imports no torch; the protocol says what each module provides.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from specviz.registry.rule_settings import RuleSettings, SamplingSettings, TopBetaSettings
from specviz.settings import Configured, described_fields

if TYPE_CHECKING:
    from specviz.rules import greedy, sampling, top_beta
    from specviz.rules.acceptance import Rule, RuleModule

    _modules: tuple[RuleModule, ...] = (greedy, sampling, top_beta)  # modules meet their protocol

CANDIDATES_SHOWN = 3  # the target's best tokens the round view draws under a drafted token, by default


@dataclass(frozen=True)
class RuleEntry:
    """A verification rule as the rest of the product sees it.

    ``module`` (in :mod:`specviz.rules`, or a full dotted name) implements :class:`~specviz.rules.acceptance.
    RuleModule`; ``settings``: its group in :mod:`specviz.registry.rule_settings`, which ``build`` hands the
    module (the sidebar enables the widgets of its
    ``fields``); ``lossless``: it preserves the target's law; ``correction`` and ``bonus``: what the round view calls
    the token the target emits after a rejection and after a fully accepted draft; ``alpha``: what alpha means
    under it (:meth:`Rule.acceptance_alpha`), stated beside every figure of it; ``verify_label``: the round view's
    Verify row label (``{field}``: a config value); ``candidates``: the config field that says how many of the
    target's best tokens the Verify row draws (else :data:`CANDIDATES_SHOWN`); ``chart_legend``: what a card's chart
    draws besides p and q under this rule (HTML); ``formula``: the rule in one line for the lesson player
    (``{field}``: a config value); ``test``: how the player draws a token's test ("draw": u against min(1, p/q);
    "argmax": the target's choice; "candidates": the target's best few within a gap); ``tree_walk``: the player's
    heading for its walk down a draft tree; ``compared_over``: a setting of its group and the values the Compare
    rules page checks a draft with (else the config's own)."""

    name: str
    label: str
    help: str
    module: str
    lossless: bool
    correction: str
    bonus: str
    alpha: str
    settings: type | None = None
    verify_label: str = "Verify"
    candidates: str | None = None
    chart_legend: str = ""
    formula: str = ""
    test: str = "argmax"
    tree_walk: str = "The walk down the tree: at each level the siblings are checked in turn, the first accepted kept"
    compared_over: tuple[str, tuple[Any, ...]] | None = None

    @property
    def fields(self) -> tuple[str, ...]:
        """The config fields it reads: its settings group's."""
        return tuple(described_fields(self.settings)) if self.settings else ()

    def build(self, config: Configured) -> Rule:
        name = self.module if "." in self.module else f"specviz.rules.{self.module}"
        settings = config.settings(self.settings) if self.settings else None  # the rule's own group only
        return cast("RuleModule", importlib.import_module(name)).build(settings)

    def candidates_shown(self, config: Configured) -> int:
        return int(config.value(self.candidates)) if self.candidates else CANDIDATES_SHOWN

    def compared(self, config: Configured) -> list[tuple[str, Rule]]:
        """(label, rule) for each setting the Compare rules page checks a draft with: one per ``compared_over``
        value (labelled with it and the group's other settings), else the config's."""
        if self.compared_over is None:
            return [(self.label, self.build(config))]
        setting, values = self.compared_over
        others = " ".join(f"{n}={config.value(n)}" for n in self.fields if n != setting)
        return [
            (f"{self.label} {setting}={v} {others}".strip(), self.build(config.replace(**{setting: v}))) for v in values
        ]


GREEDY, SAMPLING, TOP_BETA = "greedy", "sample", "topbeta"  # other modules name a rule by these only
RULE_ENTRIES = [
    RuleEntry(
        GREEDY,
        "greedy",
        "accept a drafted token when it is the target's argmax; lossless for greedy decoding",
        "greedy",
        lossless=True,
        correction="target's choice (argmax p)",
        bonus="bonus: target's choice (argmax p)",
        alpha="α = share of verified positions where argmax q = argmax p (greedy accepts exactly those)",
        chart_legend=" <span>← argmax p: the target's choice</span>",
        formula="Greedy: accept x̃ᵢ ⇔ x̃ᵢ = argmax p(· | prefix); at the first mismatch emit argmax p; after a full "
        "block emit the bonus argmax p.",
        tree_walk="The walk down the tree: at each level the sibling that is the target's argmax is accepted",
    ),
    RuleEntry(
        SAMPLING,
        "spec. sampling",
        "accept with probability min(1, p/q), else sample the residual "
        "max(0, p - q); the output follows p exactly (Leviathan et al. 2023, Chen et al. 2023)",
        "sampling",
        settings=SamplingSettings,
        lossless=True,
        correction="resampled from the residual",
        bonus="bonus, drawn from p",
        alpha="α = mean over verified positions of Σₓ min(p(x), q(x)) on the warped p and q "
        "(P(accept) of a fresh x ~ q)",
        chart_legend=' <span style="color:#ef6c00">■ residual max(0, p − q)</span> <span>| u: the uniform draw on '
        "the q-bar (accepted where p covers it: u &lt; p/q)</span>",
        formula="Speculative sampling: accept x̃ᵢ ~ q if u < min(1, p(x̃ᵢ)/q(x̃ᵢ)), u ~ U(0,1); at the first rejection "
        "emit x ~ norm(max(0, p − q)); after a full block emit x ~ p.",
        test="draw",
        tree_walk="Recursive rejection sampling",
    ),
    RuleEntry(
        TOP_BETA,
        "top-β + τ",
        "accept a drafted token among the target's top beta within tau of its best (SpecDec, Xia et al. 2023); lossy",
        "top_beta",
        settings=TopBetaSettings,
        lossless=False,
        correction="target's top-1",
        bonus="bonus: target's top-1",
        alpha="α = share of verified positions where argmax q is in the target's top β within τ of its top-1",
        verify_label="Verify (β = {beta})",
        candidates="beta",
        formula="Top-β + τ (SpecDec): accept x̃ᵢ ⇔ x̃ᵢ is among the target's β = {beta} best and "
        "log p(top1) − log p(x̃ᵢ) ≤ τ = {tau}; else emit argmax p.",
        test="candidates",
        tree_walk="The walk down the tree: at each level the first sibling among the target's top β within τ is "
        "accepted",
        compared_over=("beta", (1, 2, 3, 4, 5)),
    ),
]
RULES = {entry.name: entry for entry in RULE_ENTRIES}


def register(entry: RuleEntry) -> None:
    """Add a rule; its settings group, if any, must be one :class:`RuleSettings` joins (the config's fields)."""
    if entry.name in RULES or (entry.settings and entry.settings not in RuleSettings.__mro__):
        raise ValueError(f"a rule named {entry.name!r} is registered already, or its settings are no config's")
    RULE_ENTRIES.append(entry)
    RULES[entry.name] = entry


def unregister(name: str) -> None:
    RULE_ENTRIES.remove(RULES.pop(name))


def rule_entry(name: str) -> RuleEntry:
    return RULES[name]


def rule_for(config: Configured) -> Rule:
    """The verification rule the config names, built by its registry entry."""
    return rule_entry(config.value("rule")).build(config)
