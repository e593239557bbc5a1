"""Tree versus chain drafting (the Recursive page). Pure data in, plain data (pandas) out; no streamlit."""

from __future__ import annotations

import pandas as pd

from specviz.analysis.common import Progress, _tick
from specviz.config import DecodeConfig
from specviz.drafters.registry import chain_drafter
from specviz.engine import ModelPair, speculative_decode


def tree_vs_chain(config: DecodeConfig, pair: ModelPair, prompt_ids: list[int],
                  on_progress: Progress = None) -> pd.DataFrame:
    """The tree drafter against standard (chain) speculative decoding on the same prompt and draft source:
    a chain with the same draft passes per round (gamma = depth) and one with the same drafted-token
    budget (gamma = tree nodes, capped at 16)."""
    tree = config.replace(drafter="tree")
    chain = config.replace(drafter=chain_drafter(bool(tree.draft and pair.draft)))
    runs = [("tree " + ("RSD-C" if tree.tree_mode == "constant" else "RSD-S"), tree),
            (f"chain, γ = depth = {tree.tree_depth}", chain.replace(gamma=tree.tree_depth)),
            (f"chain, γ = tree budget = {min(16, tree.tree_nodes())}",
             chain.replace(gamma=min(16, tree.tree_nodes())))]
    rows = []
    for i, (label, run_config) in enumerate(runs):
        trace = speculative_decode(run_config, prompt_ids=prompt_ids, pair=pair)
        s = trace.stats
        rows.append(dict(method=label, rounds=s.rounds, new_tokens=s.new_tokens,
                         accepted_per_round=s.accepted_tokens / max(1, s.rounds),
                         tokens_per_round=s.mean_tokens_per_round,
                         drafted_per_round=s.drafted_tokens / max(1, s.rounds), target_passes=s.target_forward_passes,
                         draft_passes=s.draft_forward_passes, wall_s=s.wall_ms / 1e3))
        _tick(on_progress, i + 1, len(runs))
    return pd.DataFrame(rows)
