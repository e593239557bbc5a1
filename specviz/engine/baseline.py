"""The baseline every speedup is measured against: the target alone, one cached forward per token, with the same
rule's warp and seed as the speculative run (the round loop is :mod:`specviz.engine.loop`)."""

from __future__ import annotations

import time
from typing import Callable

import torch

from specviz.config import DecodeConfig
from specviz.models.forwards import KVCachedSequence, full_forward
from specviz.models.pair import ModelPair, eos_ids
from specviz.registry.rules import rule_for


def autoregressive_decode(
    config: DecodeConfig,
    pair: ModelPair,
    prompt_ids: list[int],
    on_token: Callable[[int, float], None] | None = None,
) -> tuple[list[int], float]:
    """The baseline: the target alone, one forward per token with a KV cache, same rule warp and seed.

    Greedy rules take argmax p; the sampling rule samples from the warped p with the same seeded
    generator. Returns (new token ids, seconds). Used for wall-clock speedups, the race's target lane
    (``on_token(token, ms since the loop began)`` as each token is committed) and as plain target
    sampling in the losslessness lab.
    """
    rule = rule_for(config)
    target, vocab_size = pair.target, pair.vocab_size
    generator = torch.Generator().manual_seed(config.seed)
    state = KVCachedSequence()
    committed, eos = list(prompt_ids), eos_ids(target)
    started = time.perf_counter()
    while len(committed) - len(prompt_ids) < config.max_new_tokens and len(committed) < target.context_length:
        logits = state.feed(full_forward, target, state.pending(committed), 1)[-1, :vocab_size]
        token = rule.bonus(rule.target_distribution(logits).cpu(), generator)
        committed.append(token)
        if on_token:
            on_token(token, (time.perf_counter() - started) * 1e3)
        if token in eos:
            break
    return committed[len(prompt_ids) :], time.perf_counter() - started
