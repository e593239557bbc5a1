"""The round loop: draft, verify in ONE target pass, accept a prefix, emit a correction or bonus.

A round (Leviathan et al. 2023, Alg. 1; Xia et al. 2023, Fig. 1; Jeon et al. 2024 for trees), the
same for every drafter through its two verbs (``propose``, ``update``):
  1. draft: the drafter proposes k <= gamma tokens (a chain) or a tree of at most tree_depth levels;
  2. verify: one target forward over the uncached context tail + the drafted tokens gives the
     target's p after the prefix and after every drafted token (trees: with a tree attention mask);
  3. accept: the rule walks the proposal from the top and stops at the first rejection (trees:
     recursive rejection sampling among siblings);
  4. emit: the accepted path plus the rule's correction (after a rejection) or bonus token;
  5. update: the drafter learns its accepted path; both KV caches drop what was rejected, so the
     accepted prefix is never recomputed.
Every random draw comes from one seeded CPU generator, so a config and seed reproduce the trace.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Callable, TypeVar

import torch

from specviz.config import DecodeConfig
from specviz.drafters.base import DraftBlock, Drafter, DraftTree, Proposal
from specviz.drafters.modules import make_drafter, on_this_machine
from specviz.engine.records import Outcome, describe_chain, describe_tree, models_info, summarize, truncate_at_eos
from specviz.engine.token_texts import TokenTexts
from specviz.engine.trace import Round, Trace
from specviz.engine.verification import decide_chain, decide_tree, score_tree
from specviz.models.pair import ModelPair, eos_ids, load_pair, prompt_ids_for
from specviz.registry.drafters import drafter_entry
from specviz.registry.rules import rule_for
from specviz.rules.acceptance import Rule
from specviz.runtime import ForwardFn, KVCachedSequence, StatesForwardFn, full_forward, reserve_slots, states_forward

T = TypeVar("T")


@dataclass
class DecodeRun:
    """Per-run state: the shared models plus this run's rule, drafter, caches and random stream."""

    config: DecodeConfig
    pair: ModelPair
    rule: Rule
    drafter: Drafter
    generator: torch.Generator
    texts: TokenTexts
    target_state: KVCachedSequence
    eos: set[int]

    @property
    def target_forward(self) -> ForwardFn | StatesForwardFn:
        """Drafters that read the target's hidden states (parallel drafters, EAGLE) need runs that keep them."""
        return states_forward if drafter_entry(self.config.drafter).requires_model_outputs else full_forward

    def target_probs(self, logits: torch.Tensor) -> list[torch.Tensor]:
        """The target's p at each verified position, float32 (the rule's warp on the model's device, row by row),
        brought to the host in ONE transfer: a GPU waits once for the round's p's, not once a position."""
        warped = torch.stack([self.rule.target_distribution(row) for row in logits])  # (k + 1, V) on the device
        return list(warped.cpu().unbind())


def timed_ms(compute: Callable[[], T]) -> tuple[T, float]:
    """(result, milliseconds) of a round's step; each ends on the CPU (a ``.cpu()`` waits for a GPU's queue)."""
    started = time.perf_counter()
    result = compute()
    return result, (time.perf_counter() - started) * 1e3


def verify_chain(run: DecodeRun, committed: list[int], block: DraftBlock) -> tuple[Outcome, float]:
    """A block of k tokens: ONE causal target forward over the uncached tail + the block gives p at the
    k+1 positions after the prefix; the rule checks left to right and stops at the first rejection.
    The target's cache is cropped lazily to the new context at the next round."""
    k = block.size
    feed = run.target_state.pending(committed) + block.token_ids
    # k+1 x (V,)
    target_probs, pass_ms = timed_ms(
        lambda: run.target_probs(
            run.target_state.feed(run.target_forward, run.pair.target, feed, k + 1)[:, : run.pair.vocab_size]
        )
    )
    decision = decide_chain(block.token_ids, target_probs, block.draft_probs, run.rule, run.generator)
    outcome = describe_chain(block, target_probs, decision, run.rule, run.texts.after(committed), run.config.top_n)
    return outcome, pass_ms


def verify_tree(run: DecodeRun, committed: list[int], tree: DraftTree) -> tuple[Outcome, float]:
    """A Recursive Speculative Decoding tree: ONE target pass over every node (tree attention), walked
    with recursive rejection sampling; the target's cache keeps only the accepted path's entries."""
    target_probs, pass_ms = timed_ms(
        lambda: run.target_probs(
            score_tree(run.target_state, run.target_forward, run.pair.target, committed, tree, run.pair.vocab_size)
        )
    )
    decision = decide_tree(tree, target_probs, run.rule, run.generator)
    run.target_state.keep(list(range(len(committed))) + [len(committed) + node - 1 for node in decision.accepted_path])
    outcome = describe_tree(tree, target_probs, decision, run.rule, run.texts.after(committed), run.config.top_n)
    return outcome, pass_ms


def verify(run: DecodeRun, committed: list[int], proposal: Proposal) -> tuple[Outcome, float]:
    """Steps 2-4: a proposal verified by its shape (a tree with tree attention, a chain causally) in ONE target
    pass over its ``proposal.size + 1`` positions; (the rule's outcome, the pass's milliseconds: the forward and
    its p's in float32 on the CPU, the rest of the step being the rule and the records)."""
    return (
        verify_tree(run, committed, proposal)
        if isinstance(proposal, DraftTree)
        else verify_chain(run, committed, proposal)
    )


def play_round(run: DecodeRun, committed: list[int], gamma: int, index: int) -> Round:
    """Round ``index`` with any drafter, chain or tree, through the drafters' two verbs, as the trace records it
    (cut after an emitted EOS)."""
    # 1. draft: up to gamma tokens (a chain) or levels (a tree)
    proposal, draft_ms = timed_ms(lambda: run.drafter.propose(committed, gamma, run.rule, run.generator))
    # 2.-4. verify in ONE target pass, accept a path, then the correction or the bonus
    (outcome, pass_ms), verify_ms = timed_ms(lambda: verify(run, committed, proposal))
    # 5. tell the drafter how its proposal fared (adaptive exit; a tree keeps its accepted path's caches)
    run.drafter.update(proposal.size, outcome.accepted_path)
    outcome = truncate_at_eos(outcome, run.eos)
    emitted = outcome.emitted_ids
    return Round(
        index=index,
        prefix_len=len(committed),
        draft=outcome.positions,
        correction=outcome.correction,
        bonus=outcome.bonus,
        emitted_ids=emitted,
        emitted_texts=run.texts.after(committed).sequence(emitted),
        draft_ms=draft_ms,
        verify_ms=verify_ms,
        draft_forward_passes=proposal.forward_passes,
        target_forward_passes=1,
        target_positions=proposal.size + 1,
        target_pass_ms=pass_ms,
        exit_threshold=proposal.exit_threshold if isinstance(proposal, DraftBlock) else None,  # trees: no exit
        tree=outcome.tree,
    )


def speculative_decode(
    config: DecodeConfig,
    prompt: str | None = None,
    prompt_ids: list[int] | None = None,
    pair: ModelPair | None = None,
    on_round: Callable[[Round, int], None] | None = None,
    rule: Rule | None = None,
) -> Trace:
    """Run speculative decoding for a config and record every round into a :class:`Trace` (a config validated
    where it was built is not checked again: :meth:`DecodeConfig.validated`).

    ``on_round(record, new_tokens_so_far)`` is called after each round (progress bars). ``rule``
    overrides the config's rule (the losslessness lab passes a deliberately broken one). A machine-dependent choice
    the config leaves open (a flat tree's block) is made here from this machine's profile, and the trace records
    the config with it made, so the trace's config reproduces the run on any machine.
    """
    config.validated()
    pair = pair or load_pair(config)
    config = on_this_machine(config, pair.target)
    ids = prompt_ids_for(pair, config, prompt, prompt_ids)
    target_state = KVCachedSequence()
    run = DecodeRun(
        config,
        pair,
        rule or rule_for(config),
        make_drafter(config, pair, target_state),
        torch.Generator().manual_seed(config.seed),
        TokenTexts(pair.target.tokenizer),
        target_state,
        eos_ids(pair.target),
    )
    # γ bounds a chain's drafted tokens, and a tree's levels (its depth)
    gamma = config.tree_depth if drafter_entry(config.drafter).drafts_tree(config) else config.gamma
    for model in {
        id(m): m for m in (pair.target, pair.draft) if m is not None
    }.values():  # sized once, before the clock
        reserve_slots(model, len(ids) + config.max_new_tokens + gamma + 1)
    committed = list(ids)
    rounds: list[Round] = []
    stop_reason = "max_new_tokens"
    started = time.perf_counter()
    while (new := len(committed) - len(ids)) < config.max_new_tokens:
        room = pair.target.context_length - len(committed)
        if room <= 0:
            stop_reason = "context"
            break
        # leave room for the correction/bonus token within max_new_tokens and the context
        record = play_round(run, committed, max(0, min(gamma, config.max_new_tokens - new - 1, room - 1)), len(rounds))
        record = dataclasses.replace(record, ended_ms=(time.perf_counter() - started) * 1e3)
        rounds.append(record)
        committed.extend(record.emitted_ids)
        if on_round:
            on_round(record, len(committed) - len(ids))
        if run.eos & set(record.emitted_ids):
            stop_reason = "eos"
            break
    wall_ms = (time.perf_counter() - started) * 1e3
    output_ids = committed[len(ids) :]
    return Trace(
        config=config,
        models=models_info(pair, config),
        prompt_text=prompt if prompt_ids is None else None,
        prompt_ids=ids,
        prompt_tokens=run.texts.sequence(ids),
        output_ids=output_ids,
        # transformers types decode() as str | list[str]; one flat id list decodes to one str
        output_text=pair.target.tokenizer.decode(output_ids, skip_special_tokens=False),  # type: ignore[arg-type]
        rounds=rounds,
        stats=summarize(rounds, len(output_ids), stop_reason, wall_ms),
    )
