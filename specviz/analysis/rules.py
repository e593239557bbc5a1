"""Rules on the same draft (the Compare rules page). Pure data in, plain data (pandas) out; no streamlit."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import torch

from specviz.analysis.common import _tick, stats_of
from specviz.config import DecodeConfig
from specviz.drafters import model
from specviz.drafters.modules import draft_source, drafter_settings, states_module
from specviz.drafters.suffix import FROM_DRAFT_MODEL
from specviz.engine import ModelPair, autoregressive_decode, speculative_decode
from specviz.engine.records import status_of
from specviz.engine.trace import Round
from specviz.limits import Progress
from specviz.registry.drafters import SUFFIX
from specviz.registry.rules import GREEDY, RULE_ENTRIES, TOP_BETA, rule_entry
from specviz.rules.acceptance import check_block
from specviz.rules.distributions import one_hot
from specviz.runtime.protocol import KVCachedSequence, first_difference
from specviz.runtime.reference import full_forward


@dataclass(frozen=True)
class ComparedDraft:
    """The drafted chain of a round the page compares the rules on: a chain round's block; a tree round's leading
    branch (the first child at each level: the draft model's chain where it drafted, else the best path).
    ``by_model[i]``: whether token i was drawn from a model's q (False: a deterministic proposal, q one-hot)."""

    token_ids: list[int]
    texts: list[str]
    by_model: list[bool]


def compared_draft(rnd: Round) -> ComparedDraft:
    """The chain of ``rnd`` the rules are compared on (:class:`ComparedDraft`)."""
    if rnd.tree is None:
        return ComparedDraft([p.token_id for p in rnd.draft], [p.text for p in rnd.draft], [True] * len(rnd.draft))
    branch, node = [], 0
    while children := [n for n in rnd.tree.nodes if n.parent == node]:
        node = min(children, key=lambda child: child.sibling_rank).index
        branch.append(rnd.tree.nodes[node])
    return ComparedDraft(
        [n.token_id for n in branch], [n.text for n in branch], [n.source in ("", FROM_DRAFT_MODEL) for n in branch]
    )


def score_draft(
    config: DecodeConfig, pair: ModelPair, prefix: list[int], draft_ids: list[int]
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Target logits at the k+1 positions after ``prefix`` (one pass over prefix + draft) and the
    draft's logits at the k drafted positions (one teacher-forced pass, the parallel drafter's one pass, or EAGLE's
    head on its own features; the suffix drafter's: its pair's draft model), or None for n-gram."""
    target_state = KVCachedSequence()
    target_logits = target_state.feed(full_forward, pair.target, prefix + draft_ids, len(draft_ids) + 1)
    own = states_module(config.drafter)
    if own:  # drafters on the target's states score a given draft their own way
        along = own.draft_logits_along(*drafter_settings(config), pair, prefix, draft_ids)
        return target_logits[:, : pair.vocab_size], along[:, : pair.vocab_size]
    draft = draft_source(config, pair)
    if draft is None and config.drafter == SUFFIX and pair.draft:
        draft = model.draft_source(None, drafter_settings(config)[1], pair)
    if draft is None:
        return target_logits[:, : pair.vocab_size], None
    draft_state = KVCachedSequence()
    draft_logits = draft_state.feed(draft[1], draft[0], prefix + draft_ids[:-1], len(draft_ids))
    return target_logits[:, : pair.vocab_size], draft_logits[:, : pair.vocab_size]


def compare_rules_on_draft(
    config: DecodeConfig, pair: ModelPair, prefix: list[int], draft_ids: list[int], by_model: list[bool] | None = None
) -> pd.DataFrame:
    """One drafted block checked by every registered rule, each with the config's settings or, for a rule whose entry
    names ``compared_over``, once per value of that setting (top-β: β = 1..5).

    Each rule walks the block left to right and stops at its first rejection (later tokens are
    'not verified'). Every walk draws from a generator seeded with the config's seed. ``by_model``
    (:class:`ComparedDraft`): which tokens a model drew (the others, and every token of a drafter without a model, are
    deterministic proposals, q one-hot).
    """
    if not draft_ids:
        raise ValueError("compare_rules_on_draft needs at least one drafted token")
    target_logits, draft_logits = score_draft(config, pair, prefix, draft_ids)
    drawn = by_model or [True] * len(draft_ids)
    rows = []
    for label, rule in [compared for entry in RULE_ENTRIES for compared in entry.compared(config)]:
        p = [rule.target_distribution(row).cpu() for row in target_logits[: len(draft_ids)]]
        q = [
            rule.draft_distribution(draft_logits[i]).cpu()
            if draft_logits is not None and drawn[i]
            else one_hot(token, pair.vocab_size)
            for i, token in enumerate(draft_ids)
        ]
        verdicts = check_block(rule, draft_ids, p, q, torch.Generator().manual_seed(config.seed))
        rows += [
            dict(
                rule=label,
                position=i + 1,
                token_id=token,
                status=status_of(verdict),
                accept_prob=verdict and verdict.accept_prob,
                uniform=verdict and verdict.uniform,
            )
            for i, (token, verdict) in enumerate(zip(draft_ids, verdicts))
        ]
    return pd.DataFrame(rows, columns=["rule", "position", "token_id", "status", "accept_prob", "uniform"])


def lossy_departures(
    config: DecodeConfig, pair: ModelPair, prompt_ids: list[int], on_progress: Progress | None = None
) -> pd.DataFrame:
    """For each β its registry entry compares (top-beta + tau, β = 1..5): the full output and where it departs from
    the target's greedy text."""
    reference, _ = autoregressive_decode(config.replace(rule=GREEDY), pair, prompt_ids)
    tokenizer = pair.target.tokenizer
    rows = []
    betas = beta_values()
    for i, beta in enumerate(betas):
        trace = speculative_decode(config.replace(rule=TOP_BETA, beta=beta), prompt_ids=prompt_ids, pair=pair)
        out, stats = trace.output_ids, stats_of(trace)
        first = first_difference(out, reference)
        rows.append(
            dict(
                beta=beta,
                tau=config.tau,
                acceptance_rate=stats.acceptance_rate,
                tokens_per_round=stats.mean_tokens_per_round,
                departs_at=first,
                same_as_target=first is None,
                common_prefix=tokenizer.decode(out[: first if first is not None else len(out)]),
                output_after=tokenizer.decode(out[first:]) if first is not None else "",
                target_after=tokenizer.decode(reference[first:]) if first is not None else "",
            )
        )
        _tick(on_progress, i + 1, len(betas))
    return pd.DataFrame(rows)


def beta_values() -> tuple[int, ...]:
    """The β values top-β + τ is compared over (its registry entry's ``compared_over``)."""
    compared = rule_entry(TOP_BETA).compared_over
    assert compared is not None and compared[0] == "beta", "top-β is compared over β"
    return compared[1]


def word_snippet(text: str, limit: int, from_end: bool = False) -> str:
    """At most ``limit`` characters of ``text`` (its end when ``from_end``), cut at a space so no word is halved, with
    an ellipsis where something was cut."""
    if len(text) <= limit:
        return text
    if from_end:
        cut = text[-limit:]
        return "…" + (cut.split(" ", 1)[1] if " " in cut[1:] else cut)
    cut = text[:limit]
    return (cut.rsplit(" ", 1)[0] if " " in cut[1:] else cut) + "…"


NEVER = "never (the target's text)"  # a setting that writes the target's greedy text throughout


def departures_table(table: pd.DataFrame) -> pd.DataFrame:
    """:func:`lossy_departures` as a reader wants it: whole token numbers (1-based), word-bounded snippets."""
    return pd.DataFrame(
        {
            "β": table.beta,
            "tokens per round": table.tokens_per_round.round(2),
            "departs at token": [
                NEVER if same else str(int(at) + 1) for same, at in zip(table.same_as_target, table.departs_at)
            ],
            "text before": [word_snippet(text, 60, from_end=True) for text in table.common_prefix],
            "this β then writes": [word_snippet(text, 60) for text in table.output_after],
            "the target writes": [word_snippet(text, 60) for text in table.target_after],
        }
    )


def beta_effect(table: pd.DataFrame) -> str:
    """What this run shows about larger β, in words: whether its accepted runs grew, and how lossy it got."""
    first, last = table.iloc[0], table.iloc[-1]
    runs = (
        f"β = {last.beta} accepted longer runs than β = {first.beta} here ({last.tokens_per_round:.2f} vs "
        f"{first.tokens_per_round:.2f} tokens per round)"
        if last.tokens_per_round > first.tokens_per_round + 0.005
        else f"on this prompt every β gives {first.tokens_per_round:.2f} tokens per round: where the draft missed, "
        "its token was not among the target's top β within τ, so a larger β changed nothing"
    )
    departed = int((~table.same_as_target).sum())
    runs = runs if runs.startswith("β") else runs[0].upper() + runs[1:]  # "Β" would read as a B
    return f"{runs}; {departed} of {len(table)} settings depart from the target's greedy text."
