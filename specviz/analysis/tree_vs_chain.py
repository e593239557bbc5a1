"""Tree versus chain drafting (the Recursive page). Pure data in, plain data (pandas) out; no streamlit."""

from __future__ import annotations

import pandas as pd

from specviz.analysis.common import _tick, stats_of
from specviz.config import DecodeConfig
from specviz.engine import ModelPair, speculative_decode
from specviz.limits import Progress
from specviz.registry.drafters import chain_drafter, drafter_entry


def tree_vs_chain(
    config: DecodeConfig, pair: ModelPair, prompt_ids: list[int], on_progress: Progress | None = None
) -> pd.DataFrame:
    """A tree (``config`` drafts one: the RSD tree drafter, or EAGLE-2's dynamic tree) against standard (chain)
    speculative decoding on the same prompt and draft source: a chain with the same draft passes per round
    (gamma = depth) and one with the same drafted-token budget (gamma = tree nodes, capped at 16)."""
    entry = drafter_entry(config.drafter)
    chain = entry.chain_config(config)
    if not entry.tree_when:  # the RSD tree drafts from the draft model when the pair has one
        chain = config.replace(drafter=chain_drafter(bool(config.draft and pair.draft)))
    label = config.settings(entry.settings).tree_label if entry.settings else entry.label
    budget = min(16, entry.tree_nodes(config))
    runs = [
        (label, config),
        (f"chain, γ = depth = {config.tree_depth}", chain.replace(gamma=config.tree_depth)),
        (f"chain, γ = tree budget = {budget}", chain.replace(gamma=budget)),
    ]
    rows = []
    for i, (label, run_config) in enumerate(runs):
        trace = speculative_decode(run_config, prompt_ids=prompt_ids, pair=pair)
        s = stats_of(trace)
        rows.append(
            dict(
                method=label,
                rounds=s.rounds,
                new_tokens=s.new_tokens,
                accepted_per_round=s.accepted_tokens / max(1, s.rounds),
                tokens_per_round=s.mean_tokens_per_round,
                drafted_per_round=s.drafted_tokens / max(1, s.rounds),
                target_passes=s.target_forward_passes,
                draft_passes=s.draft_forward_passes,
                wall_s=s.wall_ms / 1e3,
            )
        )
        _tick(on_progress, i + 1, len(runs))
    return pd.DataFrame(rows)


COLUMNS = {
    "method": "drafting",
    "new_tokens": "new tokens",
    "accepted_per_round": "accepted per round",
    "tokens_per_round": "tokens per target pass",
    "drafted_per_round": "drafted per round",
    "target_passes": "target passes",
    "draft_passes": "draft passes",
    "wall_s": "time, s",
}


def readable(table: pd.DataFrame) -> pd.DataFrame:
    """The comparison with its columns named for a reader."""
    return table.rename(columns=COLUMNS).round(2)


def verdict(table: pd.DataFrame) -> str:
    """What this comparison says, in words that follow its own numbers: whether the tree bought more tokens per
    target pass than each chain, and whether that paid in time (a tree's pass scores all its nodes, and its draft
    passes are wider)."""
    tree, chains = table.iloc[0], table.iloc[1:]
    more = [c.method for _, c in chains.iterrows() if tree.tokens_per_round > c.tokens_per_round]
    faster = [c.method for _, c in chains.iterrows() if tree.wall_s < c.wall_s]
    best = chains.loc[chains.tokens_per_round.idxmax()]
    per_pass = f"Here the tree emitted {tree.tokens_per_round:.2f} tokens per target pass, " + (
        f"more than {' and '.join(more)}"
        if more
        else f"no more than the chains ({best.method}: {best.tokens_per_round:.2f})"
    )
    timed = f"; it was faster than {' and '.join(faster)}." if faster else "; it was not faster than a chain here."
    why = (
        " A tree pays where the draft is unsure (it hedges over the alternatives a chain bets against) and this "
        "machine's pass over the tree's nodes is nearly flat; with a confident draft a chain of the same budget goes "
        "as far for less (Jeon et al. 2024 find trees win at low acceptance and high temperature)."
    )
    return per_pass + timed + why
