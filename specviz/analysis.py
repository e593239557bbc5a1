"""Analyses behind the teaching pages: metrics from traces, sweeps, rule comparisons, losslessness
samples and parallel-verification timings. Pure data in, plain data (pandas) out; no streamlit.

Every long computation takes ``on_progress(done, total)`` so a page can show a progress bar, and
every size is bounded by the constants below so one user cannot occupy the machine for minutes.
"""

from __future__ import annotations

import statistics
import time
from collections import Counter
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd
import torch

from .config import PARALLEL_DRAFTERS, DecodeConfig
from .drafters import KVCachedSequence, full_forward
from .engine import ModelPair, autoregressive_decode, draft_forward_for, layer_skip_forward_for, parallel_drafter, speculative_decode
from .parallel_drafters import draft_logits, target_states, window_memory
from .theory import expected_speedup_for_blocks, expected_tokens_for_blocks
from .trace import NOT_VERIFIED, Trace
from .verify import GreedyRule, SpeculativeSamplingRule, TopBetaRule, one_hot

Progress = Callable[[int, int], None] | None

SWEEP_GAMMAS_MAX = 8  # block sizes per sweep
SWEEP_TOKENS_MAX = 64  # new tokens per sweep run
LAB_SAMPLES_MAX = 300  # samples per arm of the losslessness lab (~1 min on 2 CPU cores with the embedded model)
LAB_TOKENS_MAX = 3  # first M tokens compared
TIMING_REPEATS_MAX = 20
COMPARE_BETAS = (1, 2, 3, 4, 5)


def _tick(on_progress: Progress, done: int, total: int) -> None:
    if on_progress:
        on_progress(done, total)


# ---------------------------------------------------------------------------------------------
# 1. Metrics of one trace


def acceptance_by_position(trace: Trace) -> pd.DataFrame:
    """Per drafted position i (1-based), as vLLM reports acceptance:
    ``acceptance_rate`` = accepted_i / verified_i, conditional on tokens 1..i-1 accepted;
    ``accepted_per_draft`` = accepted_i / rounds that drafted at least i tokens (vLLM's per-position rate)."""
    verified, accepted, drafted = Counter(), Counter(), Counter()
    for r in trace.rounds:
        drafted.update(range(1, len(r.draft) + 1))
        for pos in r.draft:
            if pos.status != NOT_VERIFIED:
                verified[pos.index + 1] += 1
                accepted[pos.index + 1] += pos.accepted
    positions = sorted(verified)
    return pd.DataFrame({
        "position": positions,
        "verified": [verified[i] for i in positions],
        "accepted": [accepted[i] for i in positions],
        "acceptance_rate": [accepted[i] / verified[i] for i in positions],
        "accepted_per_draft": [accepted[i] / drafted[i] for i in positions],
    })


def tokens_per_round(trace: Trace) -> pd.DataFrame:
    """Histogram of tokens emitted per round."""
    counts = Counter(len(r.emitted_ids) for r in trace.rounds)
    sizes = list(range(1, max(counts, default=1) + 1))
    return pd.DataFrame({"tokens": sizes, "rounds": [counts.get(k, 0) for k in sizes]})


def accepted_lengths(trace: Trace) -> pd.DataFrame:
    """This request's histogram of accepted drafted tokens per drafting round (0 .. the largest block)."""
    counts = Counter(r.accepted_count for r in trace.rounds if r.drafted_count)
    largest = max((len(r.draft) for r in trace.rounds), default=0)
    return pd.DataFrame({"accepted": list(range(largest + 1)), "rounds": [counts.get(k, 0) for k in range(largest + 1)]})


def realised_blocks(trace: Trace) -> list[int]:
    """Tokens each round drafted in a chain (trees: their depth, the longest path a round can accept)."""
    return [max((n.depth for n in r.tree.nodes), default=0) if r.tree else len(r.draft) for r in trace.rounds]


@dataclass(frozen=True)
class TheoryCheck:
    alpha: float  # mean over verified positions of the rule's own alpha (ALPHA_DEFINITIONS)
    mean_block: float  # mean realised block size k_r
    measured_tokens_per_round: float
    expected_tokens_per_round: float  # Eq. 1 averaged over the realised blocks
    mean_acceptance_length: float  # vLLM: 1 + accepted per drafting round
    target_passes: int
    autoregressive_passes: int
    blocks: tuple[int, ...]


def theory_check(trace: Trace) -> TheoryCheck:
    """Measured mean tokens per round next to (1 - alpha^(k_r+1)) / (1 - alpha) at each realised k_r."""
    alpha, blocks = trace.stats.alpha_estimate, realised_blocks(trace)
    return TheoryCheck(alpha, sum(blocks) / max(1, len(blocks)), trace.stats.mean_tokens_per_round,
                       expected_tokens_for_blocks(alpha, blocks), trace.stats.mean_acceptance_length,
                       trace.stats.target_forward_passes, trace.stats.autoregressive_forward_passes, tuple(blocks))


@dataclass(frozen=True)
class SpeedupCheck:
    speculative_s: float
    autoregressive_s: float
    cost_ratio: float  # c measured here
    expected: float  # the theory at the trace's alpha, realised blocks and c

    @property
    def measured(self) -> float:
        return self.autoregressive_s / self.speculative_s


def measured_speedup(trace: Trace, pair: ModelPair, repeats: int = 1) -> SpeedupCheck:
    """The target alone against the trace's own wall time (same target, prompt and length, this process),
    with the theory's speedup at the trace's alpha, realised blocks and the c measured now."""
    config = DecodeConfig.from_dict(trace.config).replace(max_new_tokens=max(1, len(trace.output_ids)))
    ar_seconds = statistics.median(autoregressive_decode(config, pair, trace.prompt_ids)[1] for _ in range(repeats))
    c = cost_ratio(config, pair, trace.prompt_ids + trace.output_ids[:1])
    expected = expected_speedup_for_blocks(trace.stats.alpha_estimate, realised_blocks(trace), c)
    return SpeedupCheck(trace.stats.wall_ms / 1e3, ar_seconds, c, expected)


# ---------------------------------------------------------------------------------------------
# 2. Gamma sweep


def _draft_forward(config: DecodeConfig, pair: ModelPair):
    """(model, forward) that drafts for this config, or None for the model-free n-gram drafter."""
    if config.drafter == "model":
        return pair.draft, draft_forward_for(config, pair.draft)
    if config.drafter == "layerskip":
        return pair.target, layer_skip_forward_for(config, pair)
    return None


def _one_token_ms(loaded, forward, prefix: list[int], repeats: int) -> float:
    """Median milliseconds of one cached one-token forward after ``prefix``."""
    state = KVCachedSequence()
    state.feed(forward, loaded, prefix[:-1], 1)
    times = []
    for _ in range(repeats + 1):
        started = time.perf_counter()
        state.feed(forward, loaded, prefix[-1:], 1)
        times.append(time.perf_counter() - started)
        state.pending(prefix)  # crops the token back off
    return statistics.median(times[1:]) * 1e3


def _parallel_inputs(config: DecodeConfig, pair: ModelPair, prefix: list[int]):
    """(drafter, memory): a parallel drafter and the target-state window it reads after ``prefix``
    (the states of prefix[:-1], as a run's cache would hold them; prefix[-1] is the pending token)."""
    drafter = parallel_drafter(config, pair, KVCachedSequence())
    states = target_states(pair.target, prefix[:-1])
    return drafter, window_memory(states, len(prefix) - 1, drafter.meta.window)


def _parallel_logits(config: DecodeConfig, pair: ModelPair, prefix: list[int]) -> torch.Tensor:
    """A parallel drafter's logits (k, V) after ``prefix``: one pass over the target's states."""
    drafter, memory = _parallel_inputs(config, pair, prefix)
    return draft_logits(drafter.module, pair.target, memory, prefix[-1])


def cost_ratio(config: DecodeConfig, pair: ModelPair, prefix: list[int], repeats: int = 5) -> float:
    """c = draft time per drafted token / time of one target forward, measured here (0 for n-gram).

    Autoregressive drafts pay one forward per token; a parallel drafter pays one small pass for all
    its k tokens (on states the verification pass already computed), so its c is that pass over k."""
    target_ms = _one_token_ms(pair.target, full_forward, prefix, repeats)
    if config.drafter in PARALLEL_DRAFTERS:
        drafter, memory = _parallel_inputs(config, pair, prefix)  # the states come from verification: not timed
        draft_logits(drafter.module, pair.target, memory, prefix[-1])  # warm-up
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            k = len(draft_logits(drafter.module, pair.target, memory, prefix[-1]))
            times.append((time.perf_counter() - started) * 1e3 / k)
        return statistics.median(times) / target_ms
    draft = _draft_forward(config, pair)
    if draft is None:
        return 0.0
    return _one_token_ms(draft[0], draft[1], prefix, repeats) / target_ms


def gamma_sweep(config: DecodeConfig, pair: ModelPair, prompt_ids: list[int], gammas: list[int],
                on_progress: Progress = None) -> tuple[pd.DataFrame, float, float]:
    """Run each block size once; return (table, cost ratio c, autoregressive seconds).

    Table columns: measured tokens per round and speedup next to the closed forms evaluated at the
    alpha each run measured.
    """
    gammas = sorted(set(gammas))[:SWEEP_GAMMAS_MAX]
    config = config.replace(max_new_tokens=min(config.max_new_tokens, SWEEP_TOKENS_MAX))
    steps = len(gammas) + 2  # the baseline, c, then one run per gamma

    def tick(done: int, text: str) -> None:
        if on_progress:
            on_progress(done, steps, text)

    tick(0, "the target alone (baseline)")
    ar_ids, ar_seconds = autoregressive_decode(config, pair, prompt_ids)
    tick(1, "measuring the cost ratio c")
    c = cost_ratio(config, pair, prompt_ids + ar_ids[:1])
    rows = []
    for i, gamma in enumerate(gammas):
        tick(2 + i, f"γ = {gamma} ({i + 1} of {len(gammas)} block sizes)")
        trace = speculative_decode(config.replace(gamma=gamma), prompt_ids=prompt_ids, pair=pair)
        s, blocks = trace.stats, realised_blocks(trace)
        ar_same_length = ar_seconds * s.new_tokens / max(1, len(ar_ids))
        rows.append(dict(
            gamma=gamma, alpha=s.alpha_estimate, acceptance_rate=s.acceptance_rate, mean_block=sum(blocks) / max(1, len(blocks)),
            tokens_per_round=s.mean_tokens_per_round, expected_tokens_per_round=expected_tokens_for_blocks(s.alpha_estimate, blocks),
            speedup=ar_same_length / (s.wall_ms / 1e3), expected_speedup=expected_speedup_for_blocks(s.alpha_estimate, blocks, c),
            target_passes=s.target_forward_passes, new_tokens=s.new_tokens, wall_s=s.wall_ms / 1e3,
        ))
    tick(steps, f"done: {len(gammas)} block sizes")
    return pd.DataFrame(rows), c, ar_seconds


VOCAB_SIZES = (1024, 2048, 4096, 8192, 16384, 0)  # FR-Spec head sizes compared (0: the whole vocabulary)


def vocab_sweep(config: DecodeConfig, pair: ModelPair, prompt_ids: list[int], sizes=VOCAB_SIZES,
                on_progress: Progress = None) -> pd.DataFrame:
    """What the draft head's size K does (Zhao et al. 2025): c measured here, the rule's alpha on this
    prompt, and the theory's speedup at the config's gamma for each K (draft-model drafter only)."""
    config = config.replace(max_new_tokens=min(config.max_new_tokens, SWEEP_TOKENS_MAX), drafter="model")
    rows = []
    for i, k in enumerate(sizes):
        if on_progress:
            on_progress(i, len(sizes), f"K = {k or 'all'} ({i + 1} of {len(sizes)})")
        sized = config.replace(draft_vocab=k)
        trace = speculative_decode(sized, prompt_ids=prompt_ids, pair=pair)
        c = cost_ratio(sized, pair, prompt_ids + trace.output_ids[:1])
        alpha, blocks = trace.stats.alpha_estimate, realised_blocks(trace)
        rows.append(dict(draft_vocab=k or pair.vocab_size, cost_ratio=c, alpha=alpha, tokens_per_round=trace.stats.mean_tokens_per_round,
                         expected_speedup=expected_speedup_for_blocks(alpha, blocks, c), tokens_per_s=trace.stats.tokens_per_s))
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------------------------
# 3. Rules on the same draft


def score_draft(config: DecodeConfig, pair: ModelPair, prefix: list[int], draft_ids: list[int]):
    """Target logits at the k+1 positions after ``prefix`` (one pass over prefix + draft) and the
    draft's logits at the k drafted positions (one teacher-forced pass, or the parallel drafter's one
    pass), or None for n-gram."""
    target_state = KVCachedSequence()
    target_logits = target_state.feed(full_forward, pair.target, prefix + draft_ids, len(draft_ids) + 1)
    if config.drafter in PARALLEL_DRAFTERS:  # every slot's q comes from the same one pass
        return target_logits[:, : pair.vocab_size], _parallel_logits(config, pair, prefix)[: len(draft_ids), : pair.vocab_size]
    draft = _draft_forward(config, pair)
    if draft is None:
        return target_logits[:, : pair.vocab_size], None
    draft_state = KVCachedSequence()
    draft_logits = draft_state.feed(draft[1], draft[0], prefix + draft_ids[:-1], len(draft_ids))
    return target_logits[:, : pair.vocab_size], draft_logits[:, : pair.vocab_size]


def compare_rules_on_draft(config: DecodeConfig, pair: ModelPair, prefix: list[int], draft_ids: list[int]) -> pd.DataFrame:
    """One drafted block checked by greedy, speculative sampling and top-beta (beta = 1..5).

    Each rule walks the block left to right and stops at its first rejection (later tokens are
    'not verified'). Sampling uses the config's seed, temperature, top-k and top-p.
    """
    if not draft_ids:
        raise ValueError("compare_rules_on_draft needs at least one drafted token")
    target_logits, draft_logits = score_draft(config, pair, prefix, draft_ids)
    rules = [("greedy", GreedyRule()),
             ("speculative sampling", SpeculativeSamplingRule(config.temperature, config.top_k, config.top_p))]
    rules += [(f"top-β β={b} τ={config.tau:g}", TopBetaRule(beta=b, tau=config.tau)) for b in COMPARE_BETAS]
    rows = []
    for label, rule in rules:
        generator = torch.Generator().manual_seed(config.seed)
        rejected = False
        for i, token in enumerate(draft_ids):
            p = rule.target_distribution(target_logits[i]).cpu()
            q = rule.draft_distribution(draft_logits[i]).cpu() if draft_logits is not None else one_hot(token, pair.vocab_size)
            if rejected:
                status, accept_prob = NOT_VERIFIED, None
            else:
                verdict = rule.check(token, p, q, generator)
                status, accept_prob = ("accepted" if verdict.accepted else "rejected"), verdict.accept_prob
                rejected = not verdict.accepted
            rows.append(dict(rule=label, position=i + 1, token_id=token, status=status, accept_prob=accept_prob))
    return pd.DataFrame(rows, columns=["rule", "position", "token_id", "status", "accept_prob"])


def lossy_departures(config: DecodeConfig, pair: ModelPair, prompt_ids: list[int], on_progress: Progress = None) -> pd.DataFrame:
    """For beta = 1..5 (top-beta + tau): the full output and where it departs from the target's greedy text."""
    reference, _ = autoregressive_decode(config.replace(rule="greedy"), pair, prompt_ids)
    tokenizer = pair.target.tokenizer
    rows = []
    for i, beta in enumerate(COMPARE_BETAS):
        trace = speculative_decode(config.replace(rule="topbeta", beta=beta), prompt_ids=prompt_ids, pair=pair)
        out = trace.output_ids
        first = next((j for j, (a, b) in enumerate(zip(out, reference)) if a != b), None)
        if first is None and len(out) != len(reference):
            first = min(len(out), len(reference))
        rows.append(dict(beta=beta, tau=config.tau, acceptance_rate=trace.stats.acceptance_rate,
                         tokens_per_round=trace.stats.mean_tokens_per_round, departs_at=first,
                         same_as_target=first is None, common_prefix=tokenizer.decode(out[: first if first is not None else len(out)]),
                         output_after=tokenizer.decode(out[first:]) if first is not None else "",
                         target_after=tokenizer.decode(reference[first:]) if first is not None else ""))
        _tick(on_progress, i + 1, len(COMPARE_BETAS))
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------------------------
# 5. Parallel verification, measured


def verification_timing(pair: ModelPair, prefix: list[int], block: list[int], repeats: int = 5) -> dict:
    """Median ms of ONE target forward over the gamma block versus gamma one-token forwards.

    Both start from the same cached prefix (Leviathan et al. 2023, Sec. 4: the target scores all
    drafted positions in parallel, so one pass costs about as much as one token while memory-bound).
    """
    repeats = min(repeats, TIMING_REPEATS_MAX)
    state = KVCachedSequence()
    state.feed(full_forward, pair.target, prefix, 1)
    parallel, sequential = [], []
    for _ in range(repeats + 1):
        started = time.perf_counter()
        state.feed(full_forward, pair.target, block, len(block))
        parallel.append(time.perf_counter() - started)
        state.pending(prefix + [0])  # crop back to the prefix
        started = time.perf_counter()
        for token in block:
            state.feed(full_forward, pair.target, [token], 1)
        sequential.append(time.perf_counter() - started)
        state.pending(prefix + [0])
    return dict(gamma=len(block), parallel_ms=statistics.median(parallel[1:]) * 1e3,
                sequential_ms=statistics.median(sequential[1:]) * 1e3, repeats=repeats)


def verification_mask(prefix_len: int, gamma: int) -> np.ndarray:
    """The causal mask of the verification pass: gamma+1 queries (last prefix token + drafted tokens)
    against prefix_len + gamma keys; 1 where query i may attend to key j (j <= prefix_len - 1 + i)."""
    keys = np.arange(prefix_len + gamma)
    queries = np.arange(prefix_len - 1, prefix_len + gamma)
    return (keys[None, :] <= queries[:, None]).astype(int)


# ---------------------------------------------------------------------------------------------
# 6. Tree versus chain drafting


def tree_vs_chain(config: DecodeConfig, pair: ModelPair, prompt_ids: list[int], on_progress: Progress = None) -> pd.DataFrame:
    """The tree drafter against standard (chain) speculative decoding on the same prompt and draft source:
    a chain with the same draft passes per round (gamma = depth) and one with the same drafted-token
    budget (gamma = tree nodes, capped at 16)."""
    tree = config.replace(drafter="tree")
    chain = config.replace(drafter="model" if tree.draft and pair.draft else "layerskip")
    runs = [("tree " + ("RSD-C" if tree.tree_mode == "constant" else "RSD-S"), tree),
            (f"chain, γ = depth = {tree.tree_depth}", chain.replace(gamma=tree.tree_depth)),
            (f"chain, γ = tree budget = {min(16, tree.tree_nodes())}", chain.replace(gamma=min(16, tree.tree_nodes())))]
    rows = []
    for i, (label, run_config) in enumerate(runs):
        trace = speculative_decode(run_config, prompt_ids=prompt_ids, pair=pair)
        s = trace.stats
        rows.append(dict(method=label, rounds=s.rounds, new_tokens=s.new_tokens,
                         accepted_per_round=s.accepted_tokens / max(1, s.rounds), tokens_per_round=s.mean_tokens_per_round,
                         drafted_per_round=s.drafted_tokens / max(1, s.rounds), target_passes=s.target_forward_passes,
                         draft_passes=s.draft_forward_passes, wall_s=s.wall_ms / 1e3))
        _tick(on_progress, i + 1, len(runs))
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------------------------
# 7. Parallel drafters (seed 003)

DRAFTER_LABELS = {"blockwise": "Blockwise heads", "maskquery": "Mask-query (Spec-Drafter)",
                  "layerskip": "Layer-skip self-draft", "model": "Draft model (autoregressive)"}
COMPARE_PROMPTS_MAX = 4


def drafter_attention(config: DecodeConfig, pair: ModelPair, prompt_ids: list[int], kind: str) -> np.ndarray:
    """The attention pattern a parallel drafter uses at the end of the prompt: (k, window + 1 + k),
    one row per drafted slot, over [target states ..., pending token, slots ...]."""
    drafter, memory = _parallel_inputs(config.replace(drafter=kind), pair, prompt_ids)
    with pair.target.lock, torch.inference_mode():
        pending = pair.target.model.get_input_embeddings()(torch.tensor([prompt_ids[-1]], device=pair.target.device))
        return drafter.module.attention(memory[None], pending.float())[0].cpu().numpy()


def compare_drafters(config: DecodeConfig, pair: ModelPair, prompts_ids: list[list[int]], kinds: list[str],
                     on_progress: Progress = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Each drafter on the same prompts: (summary per drafter, acceptance per drafted position).

    Summary: mean tokens per round, acceptance, draft milliseconds and draft passes per round, and
    end-to-end tokens/s against the target alone (autoregressive, same process)."""
    prompts_ids = prompts_ids[:COMPARE_PROMPTS_MAX]
    config = config.replace(max_new_tokens=min(config.max_new_tokens, SWEEP_TOKENS_MAX))
    total, done = len(prompts_ids) * (len(kinds) + 1), 0
    ar_tokens, ar_seconds = 0, 0.0
    for ids in prompts_ids:
        out, seconds = autoregressive_decode(config, pair, ids)
        ar_tokens, ar_seconds = ar_tokens + len(out), ar_seconds + seconds
        done += 1
        _tick(on_progress, done, total)
    summary, positions = [], []
    for kind in kinds:
        traces = []
        for ids in prompts_ids:
            traces.append(speculative_decode(config.replace(drafter=kind), prompt_ids=ids, pair=pair))
            done += 1
            _tick(on_progress, done, total)
        rounds = [r for t in traces for r in t.rounds]
        drafting = [r for r in rounds if r.draft]
        tokens = sum(t.stats.new_tokens for t in traces)
        seconds = sum(t.stats.wall_ms for t in traces) / 1e3
        summary.append(dict(
            drafter=DRAFTER_LABELS.get(kind, kind), tokens_per_round=tokens / len(rounds),
            acceptance_rate=sum(t.stats.accepted_tokens for t in traces) / max(1, sum(t.stats.drafted_tokens for t in traces)),
            draft_ms_per_round=sum(r.draft_ms for r in drafting) / max(1, len(drafting)),
            draft_passes_per_round=sum(r.draft_forward_passes for r in drafting) / max(1, len(drafting)),
            tokens_per_s=tokens / seconds, speedup_vs_autoregressive=(tokens / seconds) / (ar_tokens / ar_seconds),
        ))
        merged = pd.concat([acceptance_by_position(t) for t in traces]).groupby("position")[["verified", "accepted"]].sum()
        for position, row in merged.iterrows():
            positions.append(dict(drafter=DRAFTER_LABELS.get(kind, kind), position=int(position), verified=int(row.verified),
                                  accepted=int(row.accepted), acceptance_rate=row.accepted / row.verified))
    return pd.DataFrame(summary), pd.DataFrame(positions)
