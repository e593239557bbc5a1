"""Trace records and page tables -> plotly figures (pure; tests inspect ``fig.data``; no streamlit).

``rounds``: one round's bars (p vs q per drafted token, the residual, the tree); ``charts``: the
teaching pages' charts.
"""

from .charts import (
    acceptance_by_drafter_figure, acceptance_by_position_figure, accepted_lengths_figure, drafter_attention_figure,
    gamma_sweep_figure, lab_histogram_figure, mask_figure, parallel_arrows_figure, rules_grid_figure, timeline_figure,
    tokens_per_round_figure, vocab_sweep_figure,
)
from .rounds import distribution_bars, emitted_bars, pq_bars, tree_figure

__all__ = [
    "acceptance_by_drafter_figure", "acceptance_by_position_figure", "accepted_lengths_figure", "distribution_bars",
    "drafter_attention_figure", "emitted_bars", "gamma_sweep_figure", "lab_histogram_figure", "mask_figure",
    "parallel_arrows_figure", "pq_bars", "rules_grid_figure", "timeline_figure", "tokens_per_round_figure",
    "tree_figure", "vocab_sweep_figure",
]
