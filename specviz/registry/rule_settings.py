"""The verification rules' settings (torch-free): the rule a run checks its drafts with, and each rule's own settings
group (its registry entry's ``settings``): top-β's β and τ (SpecDec, Xia et al. 2023), sampling's temperature,
top-k and top-p (applied to both p and q). A group's field names are its settings' names everywhere (CLI flags, URL
parameters, sidebar keys, trace JSON). :class:`RuleSettings` joins the choice and every group, and
:class:`~specviz.config.DecodeConfig` extends it; a rule is built from its group, which
:meth:`DecodeConfig.settings <specviz.config.DecodeConfig.settings>` reads."""

from __future__ import annotations

import math
from dataclasses import dataclass

from specviz.settings import param

BETA_MAX = 10  # SpecDec uses beta <= 5; 10 leaves room to show how lossy large beta gets


@dataclass(frozen=True)
class RuleChoice:
    """The rule a run checks its drafts with."""

    rule: str = param(
        "greedy",
        label="Rule",
        widget="radio",
        help="verification rule",  # with each rule's label and help (field_params)
    )


@dataclass(frozen=True)
class TopBetaSettings:
    """Top-β + τ (SpecDec): how far down the target's ranking, and how far below its best, a draft may be."""

    beta: int = param(
        3,
        label="β (target's top tokens a draft may be)",
        low=1,
        high=BETA_MAX,
        help="top-beta: a drafted token must be among the target's beta best (SpecDec)",
    )
    tau: float = param(
        5.0,
        label="τ (max log p(top1) − log p(token))",
        low=0.0,
        high=math.inf,
        shown=(0.0, 10.0),
        step=0.1,
        help="top-beta: max log p(top1) - log p(token) (SpecDec's tolerance)",
    )


@dataclass(frozen=True)
class SamplingSettings:
    """Speculative sampling's warps, applied to both p and q (the ratio uses the q a token was drawn from)."""

    temperature: float = param(
        1.0,
        label="Temperature",
        low=0.0,
        high=100.0,
        shown=(0.0, 2.0),
        step=0.05,
        help="sampling: temperature applied to both p and q (0 = argmax)",
    )
    top_k: int = param(
        0,
        label="Top-k (0 = off)",
        low=0,
        high=10**7,
        shown=(0, 200),
        help="sampling: keep the k most likely tokens of p and q (0 = off)",
    )
    top_p: float = param(
        1.0,
        label="Top-p",
        low=0.0,
        high=1.0,
        low_open=True,
        shown=(0.05, 1.0),
        step=0.05,
        help="sampling: nucleus mass of p and q, in (0, 1] (1 = off)",
    )


@dataclass(frozen=True)
class RuleSettings(SamplingSettings, TopBetaSettings, RuleChoice):
    """The rule and every rule's settings group, in this order: the choice, top-β's, sampling's."""
