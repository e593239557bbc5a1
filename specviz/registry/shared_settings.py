"""The settings every run shares, each with its :class:`~specviz.settings.Param` (torch-free): the models and
their precisions, the drafter, the block size, the seed and the lengths, after the rules' (the
:class:`~specviz.registry.rule_settings.RuleSettings` they extend).
:class:`~specviz.config.DecodeConfig` adds each drafter's
settings group and reads them all by flat names. :class:`DrafterShared` is the part of them a drafter's module
builds from, besides its own group."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, TypeVar

from specviz import limits
from specviz.registry.drafters import DRAFT_MODEL, DrafterEntry
from specviz.registry.rule_settings import RuleSettings
from specviz.settings import Configured, param

G = TypeVar("G")  # a drafter's settings group


@dataclass(frozen=True)
class SharedSettings(RuleSettings):
    """The shared settings: what every drafter and rule run with."""

    target: str = param(
        limits.EMBEDDED,
        label="Target model",
        widget="none",
        section="Models",
        help="target model: 'embedded' (default), a hub id, or a save_pretrained directory",
    )
    draft: str | None = param(
        None,
        label="Draft model",
        widget="none",
        section="Models",
        help="draft model spec (for drafter 'model'); with the embedded target the default is "
        "'embedded-draft', the shipped distilled draft",
    )
    drafter: str = param(
        DRAFT_MODEL,
        label="Drafter",
        widget="radio",
        section="Models",
        help="who drafts",  # with each registered drafter's label and help (field_params)
    )
    draft_vocab: int | None = param(
        None,
        label="Draft head (FR-Spec vocabulary)",
        widget="select",
        section="Models",
        low=0,
        high=10**7,
        choices=limits.DRAFT_VOCAB_CHOICES,
        choice_labels=tuple(map(limits.vocab_label, limits.DRAFT_VOCAB_CHOICES)),
        help="the draft model scores only its K most frequent tokens (Zhao et al. 2025): "
        "cheaper drafting, q = 0 elsewhere, every rule stays exact; 0 = all tokens; "
        "default: the size the draft ships with (8,192 for the embedded draft)",
    )
    tree_depth: int = param(
        3,
        label="Tree depth (draft iterations)",
        section="Models",
        low=1,
        high=limits.GAMMA_MAX,
        help="tree drafters (RSD, EAGLE-2): draft iterations, the tree's depth",
    )
    # 2: the CLI's default; the app's is the best gamma of this machine's measured profile (serving.pairs.app_defaults)
    gamma: int = param(
        2,
        label="Block size γ (drafted tokens per round)",
        low=1,
        high=limits.GAMMA_MAX,
        help="tokens drafted per round (block size)",
    )
    seed: int = param(
        0,
        label="Seed",
        widget="number",
        low=0,
        high=2**63 - 1,
        help="seeds every random draw, so a config reproduces its trace",
    )
    max_new_tokens: int = param(
        32,
        label="Max new tokens",
        low=1,
        high=limits.MAX_NEW_TOKENS_MAX,
        shown=(1, 256),
        help="stop after this many new tokens",
    )
    chat_template: bool = param(
        True,
        label="Apply the chat template",
        widget="checkbox",
        section="Prompt",
        help="wrap a text prompt in the tokenizer's chat template if it has one",
    )
    parallel_weights: str | None = param(
        None,
        label="Parallel drafter weights",
        widget="none",
        url=False,
        help="blockwise / maskquery / eagle: a trained weights file (default: the shipped one)",
    )
    top_n: int = param(
        10,
        label="Top tokens recorded",
        widget="none",
        url=False,
        low=1,
        high=limits.TOP_N_MAX,
        help="how many top tokens of each distribution a trace records",
    )
    device: str = param(
        "auto", label="Device", widget="none", url=False, help="auto (CUDA if available), cpu, cuda, cuda:N"
    )
    dtype: str = param(
        "float32",
        label="Precision",
        widget="radio",
        section="Models",
        choices=limits.DTYPES,
        choice_labels=(
            "float32 (exact)",
            "bfloat16",
            "float16",
            "int8 (exact to the int8 target; CPU)",
            "int4 (exact to the int4 target; CPU)",
        ),
        help="the models' weights and activations (every probability a rule uses is float32 either way). float32: "
        "greedy output token-identical to the target's own generate. bfloat16 / float16: half the memory traffic, "
        "but a pass over k + 1 tokens rounds unlike k + 1 one-token steps: lossless only up to rounding. int8: a "
        "quarter of float32's bytes, products summed exactly in int32, so a pass over k + 1 tokens gives the bits of "
        "k + 1 steps: exact to the int8 target, which is a coarser model than the float32 one. int4: 4-bit weights "
        "in groups of 32 (an eighth of float32's bytes), the same exact sums: exact to the int4 target, coarser still",
    )
    draft_dtype: str | None = param(
        None,
        label="Draft precision",
        widget="radio",
        section="Models",
        choices=limits.DRAFT_DTYPES,
        choice_labels=("as the target", "float32", "bfloat16", "int8 weights", "int4 weights"),
        help="the draft model's precision (int8: int8 matrices, activations quantised on the fly; int4: 4-bit "
        "weights in groups of 32, int8 activations, an int8 head; CPU): the target decides every token, so it "
        "changes how often drafts are accepted and what they cost, never the output",
    )


@dataclass(frozen=True)
class DrafterShared:
    """What a drafter's module builds from besides its own settings group (``build(settings, shared, pair,
    target_state)``), never the whole config: the shared settings drafters read, and the other drafters' groups its
    entry says it also reads (``DrafterEntry.also_reads``: a tree's layer-skip self-draft reads the layer-skip
    group's layers)."""

    drafter: str  # the entry's name: one module serves both parallel drafters, each with its own weights
    target: str  # the target's spec, named where trained weights do not fit it
    draft_vocab: int | None  # FR-Spec's head size (None: the size the draft or head ships with)
    tree_depth: int  # tree drafters: levels per round
    parallel_weights: str | None  # drafters on the target's states: a trained weights file (None: the shipped one)
    also: tuple[Any, ...] = ()  # the groups of ``DrafterEntry.also_reads``, in its order

    @classmethod
    def of(cls, config: Configured, entry: DrafterEntry) -> DrafterShared:
        """The shared settings ``config`` gives the drafter of ``entry``, with the other groups it reads."""
        names = [f.name for f in dataclasses.fields(cls) if f.name != "also"]
        return cls(**{n: config.value(n) for n in names}, also=tuple(config.settings(g) for g in entry.also_reads))

    def group(self, kind: type[G]) -> G:
        """Another drafter's settings group that this drafter's entry reads (``also_reads``)."""
        return next(g for g in self.also if type(g) is kind)
