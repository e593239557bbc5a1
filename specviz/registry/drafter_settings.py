"""Each drafter's own settings group: a frozen dataclass of :class:`~specviz.settings.Param` fields that its registry
entry names (``DrafterEntry.settings``) and :class:`~specviz.config.DecodeConfig` holds one of, read with
``config.settings(Group)``. A group's field names are its settings' names everywhere else (CLI flags, URL
parameters, sidebar keys, trace JSON), so they are unique across groups and the shared fields. No model code here:
the config, the CLI and the URL parser read these without loading torch.

A tree drafter's group also says how many tokens a round drafts (:class:`TreeShape`), which the config bounds. A
group with a choice that depends on the machine (:class:`MachineChoice`: a flat tree's block) holds it resolved, so
the config a link carries builds the same drafter on every machine.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Protocol, Self, runtime_checkable

from specviz.settings import check, param

# RSD-C (constant branching) | RSD-S (stochastic beam search) | RSD-S sized to this machine's flat pass
TREE_MODES = ("constant", "beam", "flat")
PROFILED_PASSES = 9  # the machine profile times passes over 1..9 tokens: a flat tree has at most 8 drafted nodes


@runtime_checkable
class TreeShape(Protocol):
    @property
    def tree_label(self) -> str:
        """How a comparison names the tree it drafts."""
        ...

    def tree_nodes(self, depth: int) -> int:
        """Drafted tokens per round of a tree ``depth`` levels deep."""
        ...


@runtime_checkable
class MachineChoice(Protocol):
    """A settings group with a choice that depends on this machine's measured passes: resolved once, where the config
    is made (the engine's run, the app's sidebar), into a setting of its own, so the config (and the link that carries
    it) builds the same drafter on any machine; building a drafter never reads the machine profile."""

    machine_fields: tuple[str, ...]  # the settings that hold the choice (None: still open)

    def unresolved(self) -> bool:
        """Whether its machine's choice is still to be made."""
        ...

    def resolved(self, flat_block: int) -> Self:
        """The group with its choice made from the target's measured flat block (the largest k whose pass over
        k + 1 tokens costs about one step: :meth:`~specviz.models.profile.PassProfile.flat_until`)."""
        ...


@dataclass(frozen=True)
class DraftModelSettings:
    """A separate draft model (Leviathan et al. 2023), with an optional confidence exit."""

    confidence_exit: float = param(
        0.0,
        label="Stop drafting below this draft confidence",
        section="Models",
        low=0.0,
        high=1.0,
        step=0.05,
        help="draft model: a round stops drafting at the first token the draft is unsure of, its top probability "
        "max q below this (that token is still verified; 0 = always γ tokens): γ becomes a ceiling, and guesses "
        "likely rejected cost neither draft steps nor verified rows (transformers' assistant_confidence_threshold; "
        "SpecDec++, Huang et al. 2024, learns the stop); every rule stays exact",
    )


@dataclass(frozen=True)
class LayerSkipSettings:
    """Draft & Verify's self-draft (Zhang et al. 2024): the target minus some layers, with an adaptive exit."""

    skip_layers: tuple[int, ...] | None = param(
        None,
        label="Layers to skip",
        widget="text",
        section="Models",
        help="layer-skip drafter: comma-separated layer numbers, e.g. 10,11,12 (default: the two middle layers)",
    )
    exit_threshold: float = param(
        0.0,
        label="Adaptive draft exit threshold",
        section="Models",
        low=0.0,
        high=1.0,
        step=0.05,
        help="layer-skip: stop drafting when the draft's top-1 probability falls below this (0 = off)",
    )

    def validate(self) -> None:
        skip = self.skip_layers
        check(
            skip is None or all(isinstance(i, int) and i >= 0 for i in skip), "skip_layers must be layer indices >= 0"
        )


@dataclass(frozen=True)
class NgramSettings:
    """Prompt lookup: the longest suffix of the text so far looked up in earlier text."""

    ngram_max: int = param(
        3,
        label="n-gram length",
        section="Models",
        low=1,
        high=8,
        help="n-gram drafter: the longest suffix looked up in earlier text",
    )


@dataclass(frozen=True)
class SuffixSettings:
    """SuffixDecoding (Oliaro et al., NeurIPS 2025): speculation trees from suffix trees over the prompt and this
    server's earlier outputs, with the draft model's chain in the same tree where the suffix trees are unsure."""

    suffix_alpha: float = param(
        2.0,
        label="Suffix tree: nodes per matched token (α)",
        section="Models",
        low=0.5,
        high=8.0,
        step=0.5,
        help="suffix drafter: a match of m tokens may propose up to α·m tree nodes (SuffixDecoding's MAX_SPEC = αp): "
        "a long match, as in copied code, earns a long guess; a short one risks little",
    )
    suffix_nodes: int = param(
        8,
        label="Suffix tree: most nodes per round",
        section="Models",
        low=1,
        high=32,
        help="suffix drafter: a ceiling on the suffix tree's nodes, every one verified in the target's one pass",
    )
    suffix_floor: float = param(
        0.1,
        label="Suffix tree: lowest path probability",
        section="Models",
        low=0.0,
        high=1.0,
        step=0.05,
        help="suffix drafter: a node is proposed only where the share of earlier occurrences that continued along "
        "its path is at least this",
    )
    suffix_history: bool = param(
        True,
        label="Suffix tree: learn from this server's earlier answers",
        widget="checkbox",
        section="Models",
        help="suffix drafter: look up the continuations of every answer this server produced before (a class "
        "decoding the same prompts gets them almost free); off: the prompt and this answer only (prompt lookup)",
    )
    suffix_model_below: float = param(
        1.0,
        label="Suffix tree: draft model joins below (expected tokens)",
        section="Models",
        low=0.0,
        high=16.0,
        step=0.5,
        help="suffix drafter with a draft model: the draft model adds its γ-token chain to the tree where the suffix "
        "trees expect fewer accepted tokens than this, their path probabilities summed and discounted by the share "
        "of the longest pattern matched (0: never; a pair without a draft model: never)",
    )


@dataclass(frozen=True)
class TreeSettings:
    """Recursive Speculative Decoding's trees (Jeon et al. 2024): constant branching (RSD-C, sampling without
    replacement by Gumbel-top-k) or a stochastic beam (RSD-S)."""

    tree_mode: str = param(
        "constant",
        label="Tree",
        widget="radio",
        section="Models",
        choices=TREE_MODES,
        choice_labels=("RSD-C: constant branching", "RSD-S: stochastic beam", "RSD-S sized to the flat pass"),
        help="tree drafter: constant branching (RSD-C, Gumbel-top-k), beam (RSD-S, stochastic beam search), or a "
        "beam as wide as this machine's flat pass allows: depth x width nodes verified for about one target step",
    )
    branching: int = param(
        2,
        label="Branching factor (RSD-C)",
        section="Models",
        low=1,
        high=8,
        when=("tree_mode", "constant"),
        help="tree drafter, constant mode: children per node",
    )
    beam_width: int = param(
        4,
        label="Beam width (RSD-S)",
        section="Models",
        low=1,
        high=32,
        when=("tree_mode", "beam"),
        help="tree drafter, beam mode: nodes kept per level",
    )
    flat_block: int | None = param(
        None,
        label="Flat block (RSD-S sized to the flat pass)",
        widget="text",
        section="Models",
        low=0,
        high=PROFILED_PASSES - 1,
        when=("tree_mode", "flat"),
        help="tree drafter, flat mode: the largest block k the target verifies for about one step (v(k) <= 1.25), "
        "as measured on the machine that made the config; the tree gets k // depth nodes per level. Empty: this "
        "machine's, resolved once and then carried by the link",
    )

    machine_fields = ("flat_block",)  # a MachineChoice: the flat block is this machine's measured one

    @property
    def tree_label(self) -> str:
        return "tree " + {"constant": "RSD-C", "beam": "RSD-S"}.get(self.tree_mode, "RSD-S, flat pass")

    def tree_nodes(self, depth: int) -> int:
        """sum_{k=1..depth} b^k (RSD-C) or width x depth (RSD-S: a flat tree's width from its flat block,
        :func:`flat_width`; at most the profile's largest while unresolved)."""
        if self.tree_mode == "beam":
            return self.beam_width * depth
        if self.tree_mode == "flat":
            return self.flat_width(depth) * depth
        return sum(self.branching**k for k in range(1, depth + 1))

    def flat_width(self, depth: int) -> int:
        """A flat tree's nodes per level at ``depth`` (from the largest block the profile times while unresolved)."""
        return flat_width(PROFILED_PASSES - 1 if self.flat_block is None else self.flat_block, depth)

    def unresolved(self) -> bool:
        return self.tree_mode == "flat" and self.flat_block is None

    def resolved(self, flat_block: int) -> TreeSettings:
        return dataclasses.replace(self, flat_block=flat_block) if self.unresolved() else self


def flat_width(flat_until: int, depth: int) -> int:
    """The beam width of a flat tree ``depth`` levels deep: as many nodes per level as keep the tree inside the
    target's flat region, the largest k whose pass over k + 1 tokens costs about one step (``flat_until``), so the
    whole tree is verified for about the estimate of one token (Leviathan et al. 2023, Sec. 4)."""
    return max(1, flat_until // depth)


@dataclass(frozen=True)
class EagleSettings:
    """EAGLE (Li et al. 2024) in a chain, or EAGLE-2's dynamic tree: expand the most confident nodes, keep the
    budget best by the product of the draft's confidences."""

    eagle_tree: bool = param(
        False,
        label="EAGLE-2 dynamic tree",
        widget="checkbox",
        section="Models",
        help="EAGLE: draft a dynamic tree (EAGLE-2: expand the most confident nodes, keep the "
        "budget best by the product of the draft's confidences) instead of a chain",
    )
    eagle_top_k: int = param(
        4,
        label="EAGLE-2 top-k (nodes expanded per level, children each)",
        section="Models",
        low=1,
        high=8,
        when=("eagle_tree", True),
        help="EAGLE-2: the nodes expanded at each level, and the children each gets",
    )
    eagle_budget: int = param(
        8,
        label="EAGLE-2 budget (tokens verified per round)",
        section="Models",
        low=1,
        high=64,
        when=("eagle_tree", True),
        help="EAGLE-2: nodes kept after the rerank, verified at once",
    )

    tree_label = "EAGLE-2 dynamic tree"

    def tree_nodes(self, depth: int) -> int:
        """EAGLE-2 verifies its budget whatever the depth."""
        return self.eagle_budget
