"""One entry per verification rule: the only list of them in the code.

The CLI's choices, the sidebar's radios and their help, the URL parser, the config's validation, the round view's
labels and the pages' statements of alpha all read these entries; the engine builds a run's rule from one.
A new rule is its class in :mod:`specviz.rules.acceptance` (the :class:`~specviz.rules.acceptance.Rule` protocol)
and one :class:`RuleEntry` line below.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from specviz.config import DecodeConfig
    from specviz.rules.acceptance import Rule

CANDIDATES_SHOWN = 3  # the target's best tokens the round view draws under a drafted token, by default


@dataclass(frozen=True)
class RuleEntry:
    """A verification rule as the rest of the product sees it.

    ``builder``: ``"module:function"``, the function ``(config) -> Rule`` (imported on first use, so the config and
    the CLI read the registry without torch); ``fields``: the config fields it reads (the sidebar enables their
    widgets); ``lossless``: it preserves the target's law; ``correction`` and ``bonus``: what the round view calls
    the token the target emits after a rejection and after a fully accepted draft; ``alpha``: what alpha means
    under it (:meth:`Rule.acceptance_alpha`), stated beside every figure of it; ``verify_label``: the round view's
    Verify row label (``{field}``: a config value); ``candidates``: the config field that says how many of the
    target's best tokens the Verify row draws (else :data:`CANDIDATES_SHOWN`); ``chart_legend``: what a card's chart
    draws besides p and q under this rule (HTML); ``formula``: the rule in one line for the lesson player
    (``{field}``: a config value); ``test``: how the player draws a token's test ("draw": u against min(1, p/q);
    "argmax": the target's choice; "candidates": the target's best few within a gap)."""

    name: str
    label: str
    help: str
    fields: tuple[str, ...]
    builder: str
    lossless: bool
    correction: str
    bonus: str
    alpha: str
    verify_label: str = "Verify"
    candidates: str | None = None
    chart_legend: str = ""
    formula: str = ""
    test: str = "argmax"

    def build(self, config: DecodeConfig) -> Rule:
        module, _, function = self.builder.partition(":")
        make: Callable[[DecodeConfig], Rule] = getattr(importlib.import_module(module), function)
        return make(config)

    def candidates_shown(self, config: DecodeConfig) -> int:
        return int(config.value(self.candidates)) if self.candidates else CANDIDATES_SHOWN


_ACCEPTANCE = "specviz.rules.acceptance"
GREEDY, SAMPLING, TOP_BETA = "greedy", "sample", "topbeta"  # other modules name a rule by these only
RULE_ENTRIES = (
    RuleEntry(
        GREEDY,
        "greedy",
        "accept a drafted token when it is the target's argmax; lossless for greedy decoding",
        (),
        f"{_ACCEPTANCE}:greedy_rule",
        lossless=True,
        correction="target's choice (argmax p)",
        bonus="bonus: target's choice (argmax p)",
        alpha="α = share of verified positions where argmax q = argmax p (greedy accepts exactly those)",
        chart_legend=" <span>← argmax p: the target's choice</span>",
        formula="Greedy: accept x̃ᵢ ⇔ x̃ᵢ = argmax p(· | prefix); at the first mismatch emit argmax p; after a full "
        "block emit the bonus argmax p.",
    ),
    RuleEntry(
        SAMPLING,
        "spec. sampling",
        "accept with probability min(1, p/q), else sample the residual "
        "max(0, p - q); the output follows p exactly (Leviathan et al. 2023, Chen et al. 2023)",
        ("temperature", "top_k", "top_p"),
        f"{_ACCEPTANCE}:sampling_rule",
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
    ),
    RuleEntry(
        TOP_BETA,
        "top-β + τ",
        "accept a drafted token among the target's top beta within tau of its best (SpecDec, Xia et al. 2023); lossy",
        ("beta", "tau"),
        f"{_ACCEPTANCE}:top_beta_rule",
        lossless=False,
        correction="target's top-1",
        bonus="bonus: target's top-1",
        alpha="α = share of verified positions where argmax q is in the target's top β within τ of its top-1",
        verify_label="Verify (β = {beta})",
        candidates="beta",
        formula="Top-β + τ (SpecDec): accept x̃ᵢ ⇔ x̃ᵢ is among the target's β = {beta} best and "
        "log p(top1) − log p(x̃ᵢ) ≤ τ = {tau}; else emit argmax p.",
        test="candidates",
    ),
)
RULES = {entry.name: entry for entry in RULE_ENTRIES}


def rule_entry(name: str) -> RuleEntry:
    return RULES[name]


def rule_for(config: DecodeConfig) -> Rule:
    """The verification rule the config names, built by its registry entry."""
    return rule_entry(config.rule).build(config)
