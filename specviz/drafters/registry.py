"""One entry per drafter and per verification rule: the only list of them in the code.

The CLI's choices, the sidebar's radios and their help, the URL parser, the config's validation and
the analysis pages all read these registries, and the engine builds drafters and rules from them.
A new drafter is one module in :mod:`specviz.drafters` (its class, ``build(config, pair, target_state)``
and, for an autoregressive draft, ``draft_source(config, pair)``) plus one :class:`DrafterEntry` line below.

Modules are named as strings and imported on first use, so this module (and :mod:`specviz.config`,
which validates names against it) imports no model code.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any


def resolve(reference: str) -> Any:
    """``"package.module:attribute"`` -> the attribute (importing the module on first use)."""
    module, _, attribute = reference.partition(":")
    return getattr(importlib.import_module(module), attribute)


_DRAFTERS = "specviz.drafters"


@dataclass(frozen=True)
class DrafterEntry:
    """A drafter as the rest of the product sees it.

    ``module`` (in :mod:`specviz.drafters`) has ``build(config, pair, target_state) -> drafter``, which
    makes one run's drafter, and, when ``autoregressive``, ``draft_source(config, pair) -> (model, forward)``:
    the draft forward (cost ratio c, teacher-forced q). ``draft_model``: "always" a separate draft model, "if named"
    (trees: the draft model when one is named, else the layer-skip self-draft) or "never".
    ``requires_model_outputs``: it reads the target's hidden states, so runs keep them (transformers'
    candidate generators carry the same flag). ``tree``: it proposes a token tree (block = tree depth);
    ``tree_when``: the boolean config field that makes it propose a tree instead of a chain. ``drafts_from``: what a
    round view says the round drafted from (``{position}``, ``{token}``: the last token the target verified;
    ``{pending}``: the token after it), for drafters that draft from the target's own states. ``mask_slots``: it
    drafts into [MASK] slots appended to its input (SpecDec's drafter), the picture seed 000's "Decoder input" row
    draws; the round view draws the slots for it alone.
    """

    name: str
    label: str
    help: str
    fields: tuple[str, ...]  # the DecodeConfig fields it reads (the sidebar enables their widgets)
    module: str
    autoregressive: bool = False
    draft_model: str = "never"
    requires_model_outputs: bool = False
    tree: bool = False
    tree_when: str | None = None
    drafts_from: str = ""
    mask_slots: bool = False

    def drafts_tree(self, config) -> bool:
        return self.tree or bool(self.tree_when and getattr(config, self.tree_when))

    def tree_config(self, config):
        """The config that makes it draft a tree: its own tree (``tree_when``), else the RSD tree drafter."""
        return config.replace(**{self.tree_when: True}) if self.tree_when else config.replace(drafter="tree")

    def chain_config(self, config):
        """The config of the chain drafter this one drafts its first level with (itself, for a chain)."""
        if self.tree_when:
            return config.replace(**{self.tree_when: False})
        return config.replace(drafter=chain_drafter(bool(config.draft_spec))) if self.tree else config

    def hook(self, name: str):
        """A function its module may define (``draft_logits_along``, ``ms_per_drafted_token``), else None."""
        return getattr(importlib.import_module(f"{_DRAFTERS}.{self.module}"), name, None)

    def build(self, config, pair, target_state):
        return resolve(f"{_DRAFTERS}.{self.module}:build")(config, pair, target_state)

    def draft_source(self, config, pair):
        return resolve(f"{_DRAFTERS}.{self.module}:draft_source")(config, pair) if self.autoregressive else None

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
class RuleEntry:
    """A verification rule: ``builder(config) -> Rule``; ``lossless``: it preserves the target's law;
    ``correction`` and ``bonus``: what the round view calls the token the target emits after a rejection and
    after a fully accepted draft under this rule."""

    name: str
    label: str
    help: str
    fields: tuple[str, ...]
    builder: str
    lossless: bool
    correction: str
    bonus: str

    def build(self, config):
        return resolve(self.builder)(config)


DRAFTER_ENTRIES = (
    DrafterEntry("model", "draft model", "a separate small model drafts; the target verifies (Leviathan et al. 2023)",
                 ("draft_vocab", "gamma"), "model", autoregressive=True, draft_model="always"),
    DrafterEntry("layerskip", "layer-skip",
                 "the target minus some layers drafts for itself (Draft & Verify, Zhang et al. 2024)",
                 ("skip_layers", "exit_threshold", "gamma"), "layerskip", autoregressive=True),
    DrafterEntry("ngram", "n-gram", "copy what followed the same words earlier in the text (prompt lookup)",
                 ("ngram_max", "gamma"), "ngram"),
    DrafterEntry("tree", "tree (RSD)", "Recursive Speculative Decoding: a tree of drafts from the draft model when "
                 "the pair has one, else the layer-skip self-draft (Jeon et al. 2024)",
                 ("draft_vocab", "skip_layers", "tree_mode", "branching", "tree_depth", "beam_width"), "tree",
                 draft_model="if named", tree=True),
    DrafterEntry("blockwise", "blockwise heads", "k heads on the target's last hidden state draft k tokens in one pass "
                 "(Stern et al. 2018); trained for the embedded model", ("gamma",), "parallel",
                 requires_model_outputs=True),
    DrafterEntry("maskquery", "[MASK] queries", "k [MASK] queries attend to the target's states and draft k tokens "
                 "in one pass (SpecDec, Xia et al. 2023); trained for the embedded model", ("gamma",), "parallel",
                 requires_model_outputs=True, mask_slots=True),
    DrafterEntry("eagle", "EAGLE", "one decoder layer drafts on the target's own top features, in a chain or "
                 "EAGLE-2's dynamic tree (Li et al. 2024); trained for the embedded model",
                 ("draft_vocab", "gamma", "eagle_tree", "eagle_top_k", "tree_depth", "eagle_budget"), "eagle",
                 requires_model_outputs=True, tree_when="eagle_tree",
                 drafts_from="EAGLE drafted this round from the target's own feature f at position {position} "
                             "({token}, the last token the target verified, so the feature is exact) and the "
                             "embedding of {pending}; every later token from the feature EAGLE itself predicted."),
    DrafterEntry("oracle", "oracle (draft = target)", "the target drafts for itself at full cost: every draft is "
                 "accepted, the upper bound of acceptance (and c = 1: no speedup)", ("gamma",), "oracle",
                 autoregressive=True),
)
RULE_ENTRIES = (
    RuleEntry("greedy", "greedy", "accept a drafted token when it is the target's argmax; lossless for greedy decoding",
              (), "specviz.rules.acceptance:greedy_rule", lossless=True, correction="target's choice (argmax p)",
              bonus="bonus: target's choice (argmax p)"),
    RuleEntry("sample", "spec. sampling", "accept with probability min(1, p/q), else sample the residual "
              "max(0, p - q); the output follows p exactly (Leviathan et al. 2023, Chen et al. 2023)",
              ("temperature", "top_k", "top_p"), "specviz.rules.acceptance:sampling_rule", lossless=True,
              correction="resampled from the residual", bonus="bonus, drawn from p"),
    RuleEntry("topbeta", "top-β + τ", "accept a drafted token among the target's top beta within tau of its best "
              "(SpecDec, Xia et al. 2023); lossy", ("beta", "tau"), "specviz.rules.acceptance:top_beta_rule",
              lossless=False, correction="target's top-1", bonus="bonus: target's top-1"),
)
DRAFTERS = {entry.name: entry for entry in DRAFTER_ENTRIES}
# read only by some entries
CLAIMED_FIELDS = frozenset(f for entry in (*DRAFTER_ENTRIES, *RULE_ENTRIES) for f in entry.fields)
RULES = {entry.name: entry for entry in RULE_ENTRIES}


def drafter_entry(name: str) -> DrafterEntry:
    return DRAFTERS[name]


def rule_entry(name: str) -> RuleEntry:
    return RULES[name]


def parallel_kinds() -> tuple[str, ...]:
    """The drafters that draft in one pass on the target's hidden states (trained by ``train-drafter``)."""
    return tuple(entry.name for entry in DRAFTER_ENTRIES if entry.module == "parallel")


def chain_drafter(draft_named: bool) -> str:
    """The autoregressive drafter a tree drafts its levels with (its entry's ``draft_model="if named"``): the draft
    model when the pair names one, else the layer-skip self-draft. The lab and the tree-vs-chain comparison run it."""
    return "model" if draft_named else "layerskip"


def rule_for(config):
    """The verification rule the config names, built by its registry entry."""
    return rule_entry(config.rule).build(config)


def make_drafter(config, pair, target_state=None):
    """The drafter the config names, built by its registry entry (parallel drafters read ``target_state``)."""
    return drafter_entry(config.drafter).build(config, pair, target_state)
