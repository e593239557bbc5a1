"""One entry per drafter and per verification rule: the only list of them in the code.

The CLI's choices, the sidebar's radios and their help, the URL parser, the config's validation and
the analysis pages all read these registries, and the engine builds drafters and rules from them.
A new drafter is one module (its class and its builder) plus one :class:`DrafterSpec` line below.

Builders are named as ``"module:function"`` and imported on first use, so this module (and
:mod:`specviz.config`, which validates names against it) imports no model code.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any


def resolve(reference: str) -> Any:
    """``"package.module:attribute"`` -> the attribute (importing the module on first use)."""
    module, _, attribute = reference.partition(":")
    return getattr(importlib.import_module(module), attribute)


@dataclass(frozen=True)
class DrafterSpec:
    """A drafter as the rest of the product sees it.

    ``builder(config, pair, target_state) -> drafter`` makes one run's drafter; ``source(config, pair)
    -> (model, forward) | None`` is the autoregressive draft forward (cost ratio c, teacher-forced q),
    None for drafters without one. ``draft_model``: "always" a separate draft model, "if named"
    (trees: the draft model when one is named, else the layer-skip self-draft) or "never".
    ``requires_model_outputs``: it reads the target's hidden states, so runs keep them (transformers'
    candidate generators carry the same flag). ``tree``: it proposes a token tree (block = tree depth).
    """

    name: str
    label: str
    help: str
    fields: tuple[str, ...]  # the DecodeConfig fields it reads (the sidebar enables their widgets)
    builder: str
    source: str | None = None
    draft_model: str = "never"
    requires_model_outputs: bool = False
    tree: bool = False

    def build(self, config, pair, target_state):
        return resolve(self.builder)(config, pair, target_state)

    def draft_source(self, config, pair):
        return resolve(self.source)(config, pair) if self.source else None

    def uses_draft_model(self, config) -> bool:
        return self.draft_model == "always" or (self.draft_model == "if named" and bool(config.draft_spec))

    def reads(self, draft_named: bool) -> tuple[str, ...]:
        """The fields it reads with or without a named draft model: one that drafts from the draft model
        only "if named" reads the draft's head size then, and the self-draft's skipped layers otherwise."""
        if self.draft_model != "if named":
            return self.fields
        unused = "skip_layers" if draft_named else "draft_vocab"
        return tuple(f for f in self.fields if f != unused)


@dataclass(frozen=True)
class RuleSpec:
    """A verification rule: ``builder(config) -> Rule``; ``lossless``: it preserves the target's law."""

    name: str
    label: str
    help: str
    fields: tuple[str, ...]
    builder: str
    lossless: bool

    def build(self, config):
        return resolve(self.builder)(config)


_FACTORY = "specviz.engine.factory"
DRAFTER_SPECS = (
    DrafterSpec("model", "draft model", "a separate small model drafts; the target verifies (Leviathan et al. 2023)",
                ("draft_vocab", "gamma"), f"{_FACTORY}:model_drafter", f"{_FACTORY}:model_source", draft_model="always"),
    DrafterSpec("layerskip", "layer-skip", "the target minus some layers drafts for itself (Draft & Verify, Zhang et al. 2024)",
                ("skip_layers", "exit_threshold", "gamma"), f"{_FACTORY}:layer_skip_drafter", f"{_FACTORY}:layer_skip_source"),
    DrafterSpec("ngram", "n-gram", "copy what followed the same words earlier in the text (prompt lookup)",
                ("ngram_max", "gamma"), f"{_FACTORY}:ngram_drafter"),
    DrafterSpec("tree", "tree (RSD)", "Recursive Speculative Decoding: a tree of drafts from the draft model when the pair "
                "has one, else the layer-skip self-draft (Jeon et al. 2024)",
                ("draft_vocab", "skip_layers", "tree_mode", "branching", "tree_depth", "beam_width"), f"{_FACTORY}:tree_drafter",
                draft_model="if named", tree=True),
    DrafterSpec("blockwise", "blockwise heads", "k heads on the target's last hidden state draft k tokens in one pass "
                "(Stern et al. 2018); trained for the embedded model", ("gamma",), f"{_FACTORY}:parallel_drafter",
                requires_model_outputs=True),
    DrafterSpec("maskquery", "[MASK] queries", "k [MASK] queries attend to the target's states and draft k tokens in one "
                "pass (SpecDec, Xia et al. 2023); trained for the embedded model", ("gamma",), f"{_FACTORY}:parallel_drafter",
                requires_model_outputs=True),
    DrafterSpec("oracle", "oracle (draft = target)", "the target drafts for itself at full cost: every draft is accepted, "
                "the upper bound of acceptance (and c = 1: no speedup)", ("gamma",), "specviz.oracle:oracle_drafter",
                "specviz.oracle:oracle_source"),
)
RULE_SPECS = (
    RuleSpec("greedy", "greedy", "accept a drafted token when it is the target's argmax; lossless for greedy decoding",
             (), "specviz.verify:greedy_rule", lossless=True),
    RuleSpec("sample", "spec. sampling", "accept with probability min(1, p/q), else sample the residual max(0, p - q); "
             "the output follows p exactly (Leviathan et al. 2023, Chen et al. 2023)",
             ("temperature", "top_k", "top_p"), "specviz.verify:sampling_rule", lossless=True),
    RuleSpec("topbeta", "top-β + τ", "accept a drafted token among the target's top beta within tau of its best (SpecDec, "
             "Xia et al. 2023); lossy", ("beta", "tau"), "specviz.verify:top_beta_rule", lossless=False),
)
DRAFTERS = {spec.name: spec for spec in DRAFTER_SPECS}
CLAIMED_FIELDS = frozenset(f for spec in (*DRAFTER_SPECS, *RULE_SPECS) for f in spec.fields)  # read only by some entries
RULES = {spec.name: spec for spec in RULE_SPECS}


def drafter_spec(name: str) -> DrafterSpec:
    return DRAFTERS[name]


def rule_spec(name: str) -> RuleSpec:
    return RULES[name]
