"""Tree versus chain drafting (the Recursive page). Pure data in, plain data (pandas) out; no streamlit."""

from __future__ import annotations

import pandas as pd

from specviz.analysis.common import Progress, _tick, stats_of
from specviz.config import DecodeConfig
from specviz.drafters.registry import chain_drafter, drafter_entry
from specviz.engine import ModelPair, speculative_decode


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
