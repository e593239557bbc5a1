"""One entry per drafter: the only list of them in the code.

The CLI's choices, the sidebar's radios and their help, the URL parser, the config's validation and the analysis
pages all read these entries, and the engine builds a run's drafter from one. A drafter is in one place: its module
in :mod:`specviz.drafters` (its class and the functions of its :class:`~specviz.drafters.base.DrafterModule`
protocol) plus one :class:`DrafterEntry` line below (its settings group from
:mod:`specviz.registry.drafter_settings`, what
it reads, how pages describe it); :func:`register` adds one at run time (a plug-in, or a test's toy drafter).

Modules are named as strings and imported on first use (:mod:`specviz.drafters.modules` puts them to work), so
this module imports no model code and sits below :mod:`specviz.config`, which validates names against it: an entry
reads a config only through :class:`~specviz.settings.Configured`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

from specviz.registry.drafter_settings import (
    DraftModelSettings,
    EagleSettings,
    LayerSkipSettings,
    NgramSettings,
    SuffixSettings,
    TreeSettings,
    TreeShape,
)
from specviz.settings import Configured, described_fields

C = TypeVar("C", bound=Configured)

DRAFT_MODEL, LAYER_SKIP, NGRAM, EAGLE, SUFFIX = (
    "model",
    "layerskip",
    "ngram",
    "eagle",
    "suffix",
)  # other modules run these by name


@dataclass(frozen=True)
class DrafterEntry:
    """A drafter as the rest of the product sees it.

    ``module`` (in :mod:`specviz.drafters`, or a full dotted name) implements :mod:`~specviz.drafters.base`'s
    ``DrafterModule``, and ``AutoregressiveModule`` when ``autoregressive``, ``StatesModule`` when
    ``requires_model_outputs``.
    ``fields``: the shared config fields it reads (the sidebar enables their widgets), besides its own ``settings``
    group's. ``also_reads``: other drafters' settings groups its module builds from (handed over in
    :class:`~specviz.registry.shared_settings.DrafterShared`: a tree's layer-skip self-draft reads the layer-skip
    group). ``draft_model``: "always" a separate draft model, "if named" (trees: the draft model when one is named,
    else the layer-skip self-draft), "if any" (the named draft model, else the embedded target's own, else none: the
    suffix drafter) or "never". ``requires_model_outputs``: it reads the target's hidden states, so
    runs keep them (transformers' candidate generators carry the same flag). ``tree``: it proposes a token tree
    (block = tree depth); ``tree_when``: the boolean setting that makes it propose a tree instead of a chain.
    ``drafts_from``: what a round view says the round drafted from (``{position}``, ``{token}``: the last token the
    target verified; ``{pending}``: the token after it), for drafters that draft from the target's own states.
    ``mask_slots``: it drafts into [MASK] slots appended to its input (SpecDec's drafter), the picture SpecDec's
    (Xia et al. 2023)
    "Decoder input" row draws. ``attention_title``: the Parallel drafters page draws its learned attention so titled.
    ``note``: what a page that runs it says of it (the Race page, every round's drawing).
    """

    name: str
    label: str
    help: str
    fields: tuple[str, ...]
    module: str
    settings: type | None = None
    also_reads: tuple[type, ...] = ()
    autoregressive: bool = False
    draft_model: str = "never"
    requires_model_outputs: bool = False
    tree: bool = False
    tree_when: str | None = None
    drafts_from: str = ""
    mask_slots: bool = False
    attention_title: str = ""
    note: str = ""

    def drafts_tree(self, config: Configured) -> bool:
        return self.tree or bool(self.tree_when and config.value(self.tree_when))

    def tree_config(self, config: C) -> C:
        """The config that makes it draft a tree: its own tree (``tree_when``), else the RSD tree drafter."""
        return config.replace(**{self.tree_when: True}) if self.tree_when else config.replace(drafter="tree")

    def chain_config(self, config: C) -> C:
        """The config of the chain drafter this one drafts its first level with (itself, for a chain)."""
        if self.tree_when:
            return config.replace(**{self.tree_when: False})
        return config.replace(drafter=chain_drafter(bool(config.draft_spec))) if self.tree else config

    def tree_nodes(self, config: Configured) -> int:
        """Drafted tokens per round when it drafts a tree (its settings group's shape), else 0."""
        shape = config.settings(self.settings) if self.settings else None
        return shape.tree_nodes(config.tree_depth) if isinstance(shape, TreeShape) else 0

    @property
    def own_fields(self) -> tuple[str, ...]:
        return tuple(described_fields(self.settings)) if self.settings else ()

    def reads(self, draft_named: bool) -> tuple[str, ...]:
        """The fields it reads with or without a named draft model: one that drafts from the draft model
        only "if named" reads the draft's head size then, and the self-draft's skipped layers otherwise."""
        fields = self.fields + self.own_fields
        if self.draft_model != "if named":
            return fields
        unused = ("skip_layers",) if draft_named else ("draft_vocab", "draft_dtype")
        return tuple(f for f in fields if f not in unused)


DRAFTER_ENTRIES = [
    DrafterEntry(
        DRAFT_MODEL,
        "draft model",
        "a separate small model drafts; the target verifies (Leviathan et al. 2023)",
        ("draft_vocab", "draft_dtype", "gamma"),
        "model",
        settings=DraftModelSettings,
        autoregressive=True,
        draft_model="always",
    ),
    DrafterEntry(
        LAYER_SKIP,
        "layer-skip",
        "the target minus some layers drafts for itself (Draft & Verify, Zhang et al. 2024)",
        ("gamma",),
        "layerskip",
        settings=LayerSkipSettings,
        autoregressive=True,
    ),
    DrafterEntry(
        NGRAM,
        "n-gram",
        "copy what followed the same words earlier in the text (prompt lookup)",
        ("gamma",),
        "ngram",
        settings=NgramSettings,
    ),
    DrafterEntry(
        SUFFIX,
        "suffix tree",
        "SuffixDecoding: continuations looked up in suffix trees over the prompt and every answer this server "
        "gave before, scored by how often they followed, with the draft model's chain in the same tree where they "
        "are unsure (Oliaro et al. 2025)",
        ("draft_vocab", "draft_dtype", "gamma"),
        "suffix",
        settings=SuffixSettings,
        also_reads=(DraftModelSettings,),
        draft_model="if any",
        note="The suffix drafter reads almost nothing: it looks the end of the text up in suffix trees over the "
        "prompt and every answer this server gave before (SuffixDecoding, Oliaro et al. 2025). A class decoding the "
        "same prompts is exactly the workload it was made for: from the second student on, the answer is in the "
        "tree and a round accepts as many tokens as the tree proposes. The first time, it finds only what the "
        "prompt repeats, and the draft model joins where the trees are unsure.",
    ),
    DrafterEntry(
        "tree",
        "tree (RSD)",
        "Recursive Speculative Decoding: a tree of drafts from the draft model when "
        "the pair has one, else the layer-skip self-draft (Jeon et al. 2024)",
        ("draft_vocab", "draft_dtype", "skip_layers", "tree_depth"),
        "tree",
        settings=TreeSettings,
        also_reads=(LayerSkipSettings,),
        draft_model="if named",
        tree=True,
    ),
    DrafterEntry(
        "blockwise",
        "blockwise heads",
        "k heads on the target's last hidden state draft k tokens in one pass "
        "(Stern et al. 2018); trained for the embedded model",
        ("gamma",),
        "parallel",
        requires_model_outputs=True,
        attention_title="Blockwise: every head reads h[t] (shared)",
    ),
    DrafterEntry(
        "maskquery",
        "[MASK] queries",
        "k [MASK] queries attend to the target's states and draft k tokens "
        "in one pass (SpecDec, Xia et al. 2023); trained for the embedded model",
        ("gamma",),
        "parallel",
        requires_model_outputs=True,
        mask_slots=True,
        attention_title="Mask-query: learned weights, one row per [MASK] (distinct)",
    ),
    DrafterEntry(
        EAGLE,
        "EAGLE",
        "one decoder layer drafts on the target's own top features, in a chain or "
        "EAGLE-2's dynamic tree (Li et al. 2024); trained for the embedded model",
        ("draft_vocab", "gamma", "tree_depth"),
        "eagle",
        settings=EagleSettings,
        requires_model_outputs=True,
        tree_when="eagle_tree",
        drafts_from="EAGLE drafted this round from the target's own feature f at position {position} "
        "({token}, the last token the target verified, so the feature is exact) and the "
        "embedding of {pending}; every later token from the feature EAGLE itself predicted.",
    ),
    DrafterEntry(
        "oracle",
        "oracle (draft = target)",
        "the target drafts for itself at full cost: every draft is "
        "accepted, the upper bound of acceptance (and c = 1: no speedup)",
        ("gamma",),
        "oracle",
        autoregressive=True,
    ),
]
DRAFTERS = {entry.name: entry for entry in DRAFTER_ENTRIES}


def register(entry: DrafterEntry) -> None:
    """Add a drafter (its settings group, if any, joins every config from then on)."""
    taken = {name for group in settings_groups() for name in described_fields(group)}
    if entry.name in DRAFTERS or (entry.settings and taken & described_fields(entry.settings).keys()):
        raise ValueError(f"a drafter named {entry.name!r}, or one of its settings, is registered already")
    DRAFTER_ENTRIES.append(entry)
    DRAFTERS[entry.name] = entry


def unregister(name: str) -> None:
    DRAFTER_ENTRIES.remove(DRAFTERS.pop(name))


def drafter_entry(name: str) -> DrafterEntry:
    return DRAFTERS[name]


def settings_groups() -> tuple[type, ...]:
    """The registered drafters' settings groups, in registry order (one per group)."""
    return tuple(dict.fromkeys(e.settings for e in DRAFTER_ENTRIES if e.settings is not None))


def state_drafters() -> tuple[str, ...]:
    """The drafters on the target's hidden states (parallel heads, [MASK] queries, EAGLE)."""
    return tuple(entry.name for entry in DRAFTER_ENTRIES if entry.requires_model_outputs)


def parallel_kinds() -> tuple[str, ...]:
    """The drafters that draft in one pass on the target's hidden states (trained by ``train-drafter``)."""
    return tuple(entry.name for entry in DRAFTER_ENTRIES if entry.module == "parallel")


def chain_drafter(draft_named: bool) -> str:
    """The autoregressive drafter a tree drafts its levels with (its entry's ``draft_model="if named"``): the draft
    model when the pair names one, else the layer-skip self-draft. The lab and the tree-vs-chain comparison run it."""
    return DRAFT_MODEL if draft_named else LAYER_SKIP
