"""The speculative decoding engine: the model pair, the drafter and rule factory, the round loop, records.

``pair``: load and check the models; ``factory``: build a run's rule and drafter from the registry;
``loop``: the rounds and the target-alone baseline; ``records``: what each round records.
"""

from .factory import (
    draft_forward_for, draft_vocab_for, layer_skip_forward_for, make_drafter, parallel_drafter, rule_for,
)
from .loop import DecodeRun, RoundResult, Verified, autoregressive_decode, play_round, speculative_decode
from .pair import ModelPair, eos_ids, load_pair, prompt_ids_for, uses_draft_model
from .records import TokenTexts, draft_position, models_info, summarize, truncate_at_eos, verify_block

__all__ = [
    "DecodeRun", "ModelPair", "RoundResult", "TokenTexts", "Verified", "autoregressive_decode", "draft_forward_for",
    "draft_position", "draft_vocab_for", "eos_ids", "layer_skip_forward_for", "load_pair", "make_drafter", "models_info",
    "parallel_drafter", "play_round", "prompt_ids_for", "rule_for", "speculative_decode", "summarize", "truncate_at_eos",
    "uses_draft_model", "verify_block",
]
