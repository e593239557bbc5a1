"""Trace records and page tables -> plotly figures (pure; tests inspect ``fig.data``; no streamlit).

``charts``: the teaching pages' charts. A round itself (rows, p-vs-q bars, the tree) is drawn by the
lesson player in the browser (:mod:`specviz.player`, from :mod:`specviz.render`).
"""

from .charts import (
    acceptance_by_drafter_figure, acceptance_by_position_figure, accepted_lengths_figure, drafter_attention_figure,
    gamma_sweep_figure, lab_histogram_figure, mask_figure, parallel_arrows_figure, rules_grid_figure, timeline_figure,
    tokens_per_round_figure, vocab_sweep_figure,
)

__all__ = [
    "acceptance_by_drafter_figure", "acceptance_by_position_figure", "accepted_lengths_figure",
    "drafter_attention_figure", "gamma_sweep_figure", "lab_histogram_figure", "mask_figure",
    "parallel_arrows_figure", "rules_grid_figure", "timeline_figure", "tokens_per_round_figure",
    "vocab_sweep_figure",
]
