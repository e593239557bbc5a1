"""Analyses behind the teaching pages, one module per page; pure data in, plain data (pandas) out.

Every long computation takes ``on_progress(done, total)`` so a page can show a progress bar, and
every size is bounded (``common``) so one user cannot occupy the machine for minutes. No streamlit.
"""

from .common import (
    COMPARE_BETAS, LAB_SAMPLES_MAX, LAB_TOKENS_MAX, SWEEP_GAMMAS_MAX, SWEEP_PAIRS, SWEEP_TOKENS_MAX, TIMING_REPEATS_MAX,
)
from .cost import cost_ratio, verification_costs
from .drafters import COMPARE_PROMPTS_MAX, compare_drafters, drafter_attention
from .metrics import (
    PairedTimes, SpeedupCheck, TheoryCheck, acceptance_by_position, accepted_lengths, measured_speedup, realised_blocks,
    theory_check, timed_in_alternating_pairs, tokens_per_round,
)
from .numerics import PrecisionRun, match_rate, precision_run
from .rules import compare_rules_on_draft, lossy_departures, score_draft
from .sweep import VOCAB_SIZES, best_gamma_by, gamma_sweep, gammas_tied_with, vocab_sweep
from .timing import verification_mask, verification_timing
from .tree_vs_chain import tree_vs_chain

__all__ = [
    "COMPARE_BETAS", "COMPARE_PROMPTS_MAX", "LAB_SAMPLES_MAX", "LAB_TOKENS_MAX", "SWEEP_GAMMAS_MAX", "SWEEP_PAIRS",
    "SWEEP_TOKENS_MAX",
    "TIMING_REPEATS_MAX", "VOCAB_SIZES", "PairedTimes", "SpeedupCheck", "TheoryCheck", "acceptance_by_position", "accepted_lengths",
    "best_gamma_by", "compare_drafters", "compare_rules_on_draft", "cost_ratio", "drafter_attention", "gamma_sweep", "gammas_tied_with",
    "lossy_departures", "PrecisionRun", "match_rate", "precision_run",
    "measured_speedup", "realised_blocks", "score_draft", "theory_check", "timed_in_alternating_pairs", "tokens_per_round",
    "tree_vs_chain",
    "verification_costs", "verification_mask", "verification_timing", "vocab_sweep",
]
