"""The baseline every speedup is measured against: the target alone, one cached forward per token, with the same
rule's warp and seed as the speculative run (the round loop is :mod:`specviz.engine.loop`), and the same recording
work inside its clock: each token it commits is recorded as a round records a token the target emits
(:func:`~specviz.engine.records.emitted_token`: its text, probability and top tokens), so a wall-clock speedup
compares decoding with decoding, both recorded, never a recorded run with a bare one."""

from __future__ import annotations

import time
from typing import Callable

import torch

from specviz.config import DecodeConfig
from specviz.engine.records import emitted_token
from specviz.engine.token_texts import TokenTexts
from specviz.engine.trace import EmittedToken
from specviz.models.pair import ModelPair, eos_ids
from specviz.registry.rules import rule_for
from specviz.rules.acceptance import TARGET
from specviz.runtime import KVCachedSequence, full_forward, reserve_slots


def autoregressive_decode(
    config: DecodeConfig,
    pair: ModelPair,
    prompt_ids: list[int],
    on_token: Callable[[EmittedToken, float], None] | None = None,
) -> tuple[list[int], float]:
    """The baseline: the target alone, one forward per token with a KV cache, same rule warp and seed.

    Greedy rules take argmax p; the sampling rule samples from the warped p with the same seeded
    generator. Returns (new token ids, seconds). Used for wall-clock speedups, the race's target lane
    (``on_token(its record, ms since the loop began)`` as each token is committed, its record built inside the
    clock as a round's are) and as plain target sampling in the losslessness lab.
    """
    rule = rule_for(config)
    texts = TokenTexts(pair.target.tokenizer)
    target, vocab_size = pair.target, pair.vocab_size
    generator = torch.Generator().manual_seed(config.seed)
    state = KVCachedSequence()
    reserve_slots(target, len(prompt_ids) + config.max_new_tokens + 1)  # a static buffer sized once, before the clock
    committed, eos = list(prompt_ids), eos_ids(target)
    started = time.perf_counter()
    while len(committed) - len(prompt_ids) < config.max_new_tokens and len(committed) < target.context_length:
        logits = state.feed(full_forward, target, state.pending(committed), 1)[-1, :vocab_size]
        p = rule.target_distribution(logits).cpu()
        token = rule.bonus(p, generator)
        record = emitted_token(token, p, p, TARGET, texts.after(committed), config.top_n)  # as a round's bonus
        committed.append(token)
        if on_token:
            on_token(record, (time.perf_counter() - started) * 1e3)
        if token in eos:
            break
    return committed[len(prompt_ids) :], time.perf_counter() - started
