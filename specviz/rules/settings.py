"""The verification rules' settings (torch-free): the rule a run checks its drafts with, and what each rule reads
(its registry entry's ``fields``): top-β's β and τ (SpecDec, Xia et al. 2023), sampling's temperature, top-k and
top-p (applied to both p and q). :class:`~specviz.config.DecodeConfig` extends this group."""

from __future__ import annotations

import math
from dataclasses import dataclass

from specviz.settings import param

BETA_MAX = 10  # SpecDec uses beta <= 5; 10 leaves room to show how lossy large beta gets


@dataclass(frozen=True)
class RuleSettings:
    """The rule and the settings the rules read."""

    rule: str = param(
        "greedy",
        label="Rule",
        widget="radio",
        help="verification rule",  # with each rule's label and help (field_params)
    )
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
