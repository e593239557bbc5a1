"""The round loop: draft, verify in ONE target pass, accept a prefix, emit a correction or bonus.

A round (Leviathan et al. 2023, Alg. 1; Xia et al. 2022, Fig. 1):
  1. draft: the drafter proposes k <= gamma tokens;
  2. verify: one target forward over the uncached context tail + the k drafted tokens gives the
     target's p at the k+1 positions after the prefix;
  3. accept: the rule checks drafted tokens left to right and stops at the first rejection;
  4. emit: the accepted prefix plus the rule's correction (after a rejection) or bonus token;
  5. crop: both KV caches drop what was rejected; the accepted prefix is never recomputed.
Every random draw comes from one seeded CPU generator, so a config and seed reproduce the trace.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import torch

from .config import PARALLEL_DRAFTERS, PROMPT_TOKENS_MAX, ConfigError, DecodeConfig
from .drafters import (
    AdaptiveExit,
    AutoregressiveDrafter,
    DraftBlock,
    Drafter,
    KVCachedSequence,
    NgramDrafter,
    check_skip_layers,
    default_skip_layers,
    full_forward,
    has_mixed_attention,
    layer_skip_forward,
    sliding_window,
    states_forward,
    trimmed_head_forward,
)
from .models import LoadedModel, check_same_vocabulary, encode_prompt, load_model
from .trace import (
    ACCEPTED, NOT_VERIFIED, REJECTED, DraftPosition, EmittedToken, Round, Stats, TopTokens, Trace, TreeNodeRecord,
    TreeRecord,
)
from .parallel_drafters import ParallelDrafter, default_weights, load_drafter
from .tree import DraftTree, TreeDrafter, recursive_rejection, score_tree
from .verify import Rule, Verdict, make_rule, overlap, residual_distribution


@dataclass(frozen=True)
class ModelPair:
    """The target and, for the draft-model drafter, the draft: shared, read-only."""

    target: LoadedModel
    draft: LoadedModel | None = None

    @property
    def vocab_size(self) -> int:
        """Ids both models can score (padded embedding rows beyond it are never emitted)."""
        sizes = [m.model.get_output_embeddings().weight.shape[0] for m in (self.target, self.draft) if m]
        return min(sizes)


def uses_draft_model(config: DecodeConfig) -> bool:
    """The draft-model drafter always; the tree drafter when a draft model is named (else layer-skip)."""
    return config.drafter == "model" or (config.drafter == "tree" and bool(config.draft_spec))


def load_pair(config: DecodeConfig) -> ModelPair:
    """Load (or fetch from the process cache) the models a config names and check they fit together."""
    config.validated()
    target = load_model(config.target, config.device)
    if not uses_draft_model(config):
        return ModelPair(target)
    draft = load_model(config.draft_spec, config.device)
    check_same_vocabulary(target, draft)
    return ModelPair(target, draft)


def rule_for(config: DecodeConfig) -> Rule:
    return make_rule(config.rule, beta=config.beta, tau=config.tau, temperature=config.temperature,
                     top_k=config.top_k, top_p=config.top_p)


def layer_skip_forward_for(config: DecodeConfig, pair: ModelPair):
    """The layer-skip self-draft's forward for this config (default: the target's middle layers)."""
    num_layers = pair.target.num_layers
    skip = config.skip_layers if config.skip_layers is not None else default_skip_layers(num_layers)
    try:
        skip_set = check_skip_layers(skip, num_layers)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    if has_mixed_attention(pair.target.model.config):
        raise ConfigError(f"layer-skip drafting runs one attention mask for all layers; {pair.target.name} mixes sliding "
                          "and full attention layers. Use a draft model or n-gram drafting with it.")
    if not hasattr(pair.target.model, "model") or not hasattr(pair.target.model.model, "layers"):
        raise ConfigError(f"layer-skip drafting needs a decoder-only model with model.layers; {pair.target.name} has none")
    return layer_skip_forward(skip_set)


def draft_vocab_for(config: DecodeConfig, draft: LoadedModel) -> int:
    """The draft head's size K for this run (0: the whole vocabulary). FR-Spec needs the draft's
    frequency ranking; ``None`` means the size the draft was shipped with (the full vocabulary without one)."""
    ranking = draft.vocab_ranking
    if config.draft_vocab is None:
        return ranking.recommended if ranking else 0
    if config.draft_vocab and ranking is None:
        raise ConfigError(f"A trimmed draft vocabulary (draft_vocab={config.draft_vocab}) needs a draft that ships a token "
                          f"frequency ranking, as the embedded draft does; {draft.name} has none (use 0: all tokens)")
    return 0 if ranking is None or config.draft_vocab >= len(ranking.order) else config.draft_vocab


def draft_forward_for(config: DecodeConfig, draft: LoadedModel):
    """The draft model's forward: the full output head, or FR-Spec's head over its K most frequent tokens."""
    k = draft_vocab_for(config, draft)
    return trimmed_head_forward(k) if k else full_forward


def parallel_drafter(config: DecodeConfig, pair: ModelPair, target_state: KVCachedSequence) -> ParallelDrafter:
    """Blockwise heads or the mask-query drafter, from trained weights that fit this target."""
    path = config.parallel_weights or str(default_weights(config.drafter))
    try:
        module, meta = load_drafter(path, str(pair.target.device))
    except FileNotFoundError as exc:
        raise ConfigError(f"No trained {config.drafter} weights at {path}: train them with "
                          f"`python -m specviz train-drafter --kind {config.drafter} --target {config.target}`") from exc
    hidden = int(pair.target.model.config.hidden_size)
    if meta.kind != config.drafter or meta.hidden != hidden or meta.vocab != pair.vocab_size:
        raise ConfigError(f"The weights at {path} are a {meta.kind} drafter for {meta.target} (hidden {meta.hidden}, "
                          f"vocabulary {meta.vocab}); {pair.target.name} has hidden {hidden} and vocabulary {pair.vocab_size}")
    return ParallelDrafter(module, meta, pair.target, target_state, pair.vocab_size)


def make_drafter(config: DecodeConfig, pair: ModelPair, target_state: KVCachedSequence | None = None):
    """The drafter a config names; parallel drafters read the run's target cache (``target_state``)."""
    if config.drafter in PARALLEL_DRAFTERS:
        return parallel_drafter(config, pair, target_state)
    if config.drafter == "model":
        return AutoregressiveDrafter("model", pair.draft, draft_forward_for(config, pair.draft), pair.vocab_size)
    if config.drafter == "layerskip":
        exit_rule = AdaptiveExit(config.exit_threshold) if config.exit_threshold > 0 else None
        return AutoregressiveDrafter("layerskip", pair.target, layer_skip_forward_for(config, pair), pair.vocab_size, exit_rule)
    if config.drafter == "tree":
        if sliding_window(pair.target.model.config) or has_mixed_attention(pair.target.model.config):
            raise ConfigError(f"The tree drafter needs full attention: {pair.target.name} attends through a sliding window, "
                              "which a tree's attention mask does not model. Use a chain drafter with this model.")
        source, forward = ((pair.draft, draft_forward_for(config, pair.draft)) if pair.draft
                           else (pair.target, layer_skip_forward_for(config, pair)))
        return TreeDrafter(source, forward, pair.vocab_size, config.tree_mode, config.branching, config.tree_depth,
                           config.beam_width)
    return NgramDrafter(pair.vocab_size, config.ngram_max)


def prompt_ids_for(pair: ModelPair, config: DecodeConfig, prompt: str | None, prompt_ids: list[int] | None) -> list[int]:
    """Token ids of the prompt: raw ``prompt_ids`` as given, else the text (chat template applied)."""
    if prompt_ids is None:
        if prompt is None or not prompt.strip():
            raise ConfigError("The prompt is empty: type some text to continue")
        prompt_ids = encode_prompt(pair.target.tokenizer, prompt, config.chat_template)
    if not prompt_ids:
        raise ConfigError("The prompt is empty: give at least one token id")
    if len(prompt_ids) > PROMPT_TOKENS_MAX:
        raise ConfigError(f"The prompt has {len(prompt_ids)} tokens; the limit is {PROMPT_TOKENS_MAX}")
    if len(prompt_ids) >= pair.target.context_length:
        raise ConfigError(f"The prompt fills the model's {pair.target.context_length}-token context")
    bad = [i for i in prompt_ids if not 0 <= i < pair.vocab_size]
    if bad:
        raise ConfigError(f"Prompt token ids {bad[:5]} are outside the vocabulary (0..{pair.vocab_size - 1})")
    return list(prompt_ids)


def eos_ids(loaded: LoadedModel) -> set[int]:
    """The ids that end generation, as the target's own ``generate`` would use them."""
    eos = loaded.model.generation_config.eos_token_id
    if eos is None:
        eos = loaded.tokenizer.eos_token_id
    if eos is None:
        return set()
    return set(eos) if isinstance(eos, (list, tuple)) else {int(eos)}


class TokenTexts:
    """id -> display text, decoded once per run."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.cache: dict[int, str] = {}

    def __call__(self, token_id: int) -> str:
        if token_id not in self.cache:
            self.cache[token_id] = self.tokenizer.decode([token_id])
        return self.cache[token_id]

    def top(self, probs: torch.Tensor, n: int) -> TopTokens:
        values, ids = torch.topk(probs, min(n, probs.shape[-1]))
        ids_list = [int(i) for i in ids]
        return TopTokens(ids=ids_list, texts=[self(i) for i in ids_list], probs=[float(v) for v in values])


def draft_position(index: int, token: int, p_dist: torch.Tensor, q_dist: torch.Tensor, verdict: Verdict | None,
                   rule: Rule, texts: "TokenTexts", top_n: int, beta: int) -> DraftPosition:
    """The record of one drafted token checked with ``verdict`` (None: never checked)."""
    status = NOT_VERIFIED if verdict is None else ACCEPTED if verdict.accepted else REJECTED
    return DraftPosition(
        index=index, token_id=token, text=texts(token), p=float(p_dist[token]), q=float(q_dist[token]),
        accept_prob=verdict.accept_prob if verdict else 0.0, uniform=verdict.uniform if verdict else None,
        accepted=status == ACCEPTED, status=status, overlap=overlap(p_dist, q_dist), alpha=rule.acceptance_alpha(p_dist, q_dist),
        target_top=texts.top(p_dist, top_n), draft_top=texts.top(q_dist, top_n),
        candidates=texts.top(p_dist, beta) if rule.name == "topbeta" else None,
        tau_gap=verdict.tau_gap if verdict else None,
    )


def verify_block(
    block: DraftBlock, target_probs: list[torch.Tensor], rule: Rule, generator: torch.Generator,
    texts: TokenTexts, top_n: int, beta: int,
) -> tuple[list[DraftPosition], EmittedToken | None, EmittedToken | None]:
    """Steps 3-4 of a round: check drafted tokens left to right, then take a correction or bonus."""
    positions: list[DraftPosition] = []
    rejected_at: int | None = None
    for i, (token, q_dist) in enumerate(zip(block.token_ids, block.draft_probs)):
        p_dist = target_probs[i]
        verdict = rule.check(token, p_dist, q_dist, generator) if rejected_at is None else None
        if verdict is not None and not verdict.accepted:
            rejected_at = i
        positions.append(draft_position(i, token, p_dist, q_dist, verdict, rule, texts, top_n, beta))
    if rejected_at is not None:
        p_dist, q_dist = target_probs[rejected_at], block.draft_probs[rejected_at]
        token = rule.correction(p_dist, q_dist, generator)
        residual = residual_distribution(p_dist, q_dist)
        source_dist, source = (residual, "residual") if rule.stochastic else (p_dist, "target")
        correction = EmittedToken(
            token_id=token, text=texts(token), prob=float(source_dist[token]), target_prob=float(p_dist[token]),
            source=source, distribution_top=texts.top(source_dist, top_n), target_top=texts.top(p_dist, top_n),
            residual_top=texts.top(residual, top_n),
        )
        return positions, correction, None
    p_dist = target_probs[len(block.token_ids)]
    token = rule.bonus(p_dist, generator)
    top = texts.top(p_dist, top_n)
    bonus = EmittedToken(token_id=token, text=texts(token), prob=float(p_dist[token]), target_prob=float(p_dist[token]),
                         source="target", distribution_top=top, target_top=top)
    return positions, None, bonus


def truncate_at_eos(positions, correction, bonus, eos: set[int]):
    """Cut a round's emitted tokens after the first EOS; every check made after the accepted EOS (later
    accepted tokens; in a tree, deeper siblings too) counts as not verified, and no token is emitted after it."""
    emitted = [p.token_id for p in positions if p.accepted] + [t.token_id for t in (correction, bonus) if t]
    stop = next((i for i, t in enumerate(emitted) if t in eos), None)
    if stop is None or stop == len(emitted) - 1:
        return positions, correction, bonus, emitted, stop is not None
    eos_check = [i for i, p in enumerate(positions) if p.accepted][stop]
    for pos in positions[eos_check + 1:]:
        pos.accepted, pos.status = False, NOT_VERIFIED
    return positions, None, None, emitted[: stop + 1], True


def sync_tree_with_checks(tree: TreeRecord, positions: list[DraftPosition]) -> None:
    """After EOS truncation: node statuses, the accepted path and residual bars follow the checks' statuses."""
    for node, pos in zip(tree.check_nodes, positions):
        tree.nodes[node].status = pos.status
    tree.path = [node for node, pos in zip(tree.check_nodes, positions) if pos.accepted]
    tree.residual_tops = [top if pos.status == REJECTED else None for top, pos in zip(tree.residual_tops, positions)]


@dataclass
class RoundResult:
    """What one round produced, before EOS truncation and recording."""

    positions: list[DraftPosition]
    correction: EmittedToken | None
    bonus: EmittedToken | None
    draft_ms: float
    verify_ms: float
    draft_forward_passes: int
    target_positions: int
    exit_threshold: float | None = None
    tree: TreeRecord | None = None


@dataclass
class DecodeRun:
    """Per-run state: the shared models plus this run's rule, drafter, caches and random stream."""

    config: DecodeConfig
    pair: ModelPair
    rule: Rule
    drafter: Drafter | TreeDrafter
    generator: torch.Generator
    texts: TokenTexts
    target_state: KVCachedSequence

    @property
    def target_forward(self):
        """Parallel drafters need the target's hidden states, so their runs keep them; others do not."""
        return states_forward if isinstance(self.drafter, ParallelDrafter) else full_forward

    def target_probs(self, logits: torch.Tensor) -> list[torch.Tensor]:
        return [self.rule.target_distribution(row).cpu() for row in logits]  # float32, one per position


def chain_round(run: DecodeRun, committed: list[int], max_draft: int) -> RoundResult:
    """A standard round: a block of up to ``max_draft`` tokens, then ONE target pass over it."""
    config, pair = run.config, run.pair
    # 1. draft
    t0 = time.perf_counter()
    block = run.drafter.propose(committed, max_draft, run.rule, run.generator)
    t1 = time.perf_counter()
    # 2. verify: ONE target forward over the uncached tail + drafted tokens -> p at k+1 positions
    k = len(block.token_ids)
    feed = run.target_state.pending(committed) + block.token_ids
    logits = run.target_state.feed(run.target_forward, pair.target, feed, k + 1)[:, : pair.vocab_size]  # (k+1, V)
    # 3.-4. accept a prefix, then the correction or the bonus
    positions, correction, bonus = verify_block(block, run.target_probs(logits), run.rule, run.generator, run.texts,
                                                config.top_n, config.beta)
    t2 = time.perf_counter()
    # 5. adapt the drafter; caches are cropped lazily to the new context at the next round
    run.drafter.update(k, sum(p.accepted for p in positions))
    return RoundResult(positions, correction, bonus, (t1 - t0) * 1e3, (t2 - t1) * 1e3, block.forward_passes, k + 1,
                       block.exit_threshold)


def tree_round(run: DecodeRun, committed: list[int], max_depth: int) -> RoundResult:
    """A Recursive Speculative Decoding round: draft a tree, score every node in ONE target pass,
    walk it with recursive rejection sampling, keep the accepted path's KV entries."""
    config, pair, texts = run.config, run.pair, run.texts
    t0 = time.perf_counter()
    tree = run.drafter.propose_tree(committed, max_depth, run.rule, run.generator)
    t1 = time.perf_counter()
    target_probs = run.target_probs(score_tree(run.target_state, full_forward, pair.target, committed, tree, pair.vocab_size))
    checks, path, final_p, leaf = recursive_rejection(tree, target_probs, run.rule, run.generator)
    token = run.rule.bonus(final_p, run.generator)
    positions = [draft_position(tree.nodes[c.node].depth - 1, c.token_id, c.target_probs, c.draft_probs, c.verdict,
                                run.rule, texts, config.top_n, config.beta) for c in checks]
    p_here = target_probs[path[-1] if path else 0]
    emitted = EmittedToken(token_id=token, text=texts(token), prob=float(final_p[token]), target_prob=float(p_here[token]),
                           source="target" if leaf or not run.rule.stochastic else "residual",
                           distribution_top=texts.top(final_p, config.top_n), target_top=texts.top(p_here, config.top_n),
                           residual_top=texts.top(final_p, config.top_n) if run.rule.stochastic and not leaf else None)
    t2 = time.perf_counter()
    record = tree_record(tree, checks, path, target_probs, run.rule, texts, config)
    run.target_state.keep(list(range(len(committed))) + [len(committed) + node - 1 for node in path])
    run.drafter.commit(len(committed), path)
    return RoundResult(positions, None if leaf else emitted, emitted if leaf else None, (t1 - t0) * 1e3, (t2 - t1) * 1e3,
                       tree.forward_passes, len(tree.nodes), tree=record)


def tree_record(tree: DraftTree, checks, path: list[int], target_probs, rule: Rule, texts: TokenTexts,
                config: DecodeConfig) -> TreeRecord:
    status = {c.node: ACCEPTED if c.verdict.accepted else REJECTED for c in checks}
    nodes = [TreeNodeRecord(
        index=n.index, parent=n.parent, depth=n.depth, token_id=n.token_id, text=texts(n.token_id), q=n.draft_prob,
        sibling_rank=n.sibling_rank, status=ACCEPTED if n.index == 0 else status.get(n.index, NOT_VERIFIED),
        draft_top=texts.top(tree.draft_probs[n.index], config.top_n) if n.index in tree.draft_probs else None,
        target_top=texts.top(target_probs[n.index], config.top_n),
    ) for n in tree.nodes]
    residuals = [None if c.verdict.accepted or not rule.stochastic
                 else texts.top(residual_distribution(c.target_probs, c.draft_probs), config.top_n) for c in checks]
    return TreeRecord(mode=config.tree_mode, nodes=nodes, levels=tree.levels, path=path,
                      check_nodes=[c.node for c in checks], residual_tops=residuals)


def speculative_decode(
    config: DecodeConfig,
    prompt: str | None = None,
    prompt_ids: list[int] | None = None,
    pair: ModelPair | None = None,
    on_round: Callable[[Round, int], None] | None = None,
    rule: Rule | None = None,
) -> Trace:
    """Run speculative decoding for a config and record every round into a :class:`Trace`.

    ``on_round(record, new_tokens_so_far)`` is called after each round (progress bars). ``rule``
    overrides the config's rule (the losslessness lab passes a deliberately broken one).
    """
    config.validated()
    pair = pair or load_pair(config)
    ids = prompt_ids_for(pair, config, prompt, prompt_ids)
    target_state = KVCachedSequence()
    run = DecodeRun(config, pair, rule or rule_for(config), make_drafter(config, pair, target_state),
                    torch.Generator().manual_seed(config.seed), TokenTexts(pair.target.tokenizer), target_state)
    play_round = tree_round if config.drafter == "tree" else chain_round
    block_size = config.tree_depth if config.drafter == "tree" else config.gamma
    eos = eos_ids(pair.target)
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
        result = play_round(run, committed, max(0, min(block_size, config.max_new_tokens - new - 1, room - 1)))
        positions, correction, bonus, emitted, hit_eos = truncate_at_eos(result.positions, result.correction, result.bonus, eos)
        if result.tree and hit_eos:
            sync_tree_with_checks(result.tree, positions)
        record = Round(
            index=len(rounds), prefix_len=len(committed), draft=positions, correction=correction, bonus=bonus,
            emitted_ids=emitted, emitted_texts=[run.texts(t) for t in emitted], draft_ms=result.draft_ms,
            verify_ms=result.verify_ms, draft_forward_passes=result.draft_forward_passes, target_forward_passes=1,
            target_positions=result.target_positions, exit_threshold=result.exit_threshold, tree=result.tree,
        )
        rounds.append(record)
        committed.extend(emitted)
        if on_round:
            on_round(record, len(committed) - len(ids))
        if hit_eos:
            stop_reason = "eos"
            break
    wall_ms = (time.perf_counter() - started) * 1e3
    output_ids = committed[len(ids):]
    return Trace(
        config=config.to_dict(),
        models=models_info(pair, config),
        prompt_text=prompt if prompt_ids is None else None,
        prompt_ids=ids,
        prompt_tokens=[run.texts(t) for t in ids],
        output_ids=output_ids,
        output_text=pair.target.tokenizer.decode(output_ids, skip_special_tokens=False),
        rounds=rounds,
        stats=summarize(rounds, len(output_ids), stop_reason, wall_ms),
    )


def models_info(pair: ModelPair, config: DecodeConfig) -> dict:
    target = pair.target
    draft_name = pair.draft.name if pair.draft else f"{target.name} ({config.drafter} drafter)"
    info = {"target": target.name, "draft": draft_name, "device": str(target.device),
            "dtype": str(target.model.dtype).replace("torch.", "")}
    if pair.draft and uses_draft_model(config):
        info["draft_vocab"] = draft_vocab_for(config, pair.draft) or pair.vocab_size  # tokens the draft's head scores
    return info


def summarize(rounds: list[Round], new_tokens: int, stop_reason: str, wall_ms: float) -> Stats:
    verified = [p for r in rounds for p in r.draft if p.status != NOT_VERIFIED]
    drafted = sum(r.drafted_count for r in rounds)
    accepted = sum(r.accepted_count for r in rounds)
    return Stats(
        rounds=len(rounds),
        new_tokens=new_tokens,
        drafted_tokens=drafted,
        accepted_tokens=accepted,
        acceptance_rate=accepted / drafted if drafted else 0.0,
        mean_tokens_per_round=new_tokens / len(rounds) if rounds else 0.0,
        target_forward_passes=sum(r.target_forward_passes for r in rounds),
        draft_forward_passes=sum(r.draft_forward_passes for r in rounds),
        autoregressive_forward_passes=new_tokens,
        alpha_estimate=sum(p.alpha for p in verified) / len(verified) if verified else 0.0,
        mean_acceptance_length=1 + accepted / drafting if (drafting := sum(r.drafted_count > 0 for r in rounds)) else 1.0,
        stop_reason=stop_reason,
        wall_ms=wall_ms,
        tokens_per_s=new_tokens / (wall_ms / 1e3) if wall_ms > 0 else 0.0,
    )


def autoregressive_decode(config: DecodeConfig, pair: ModelPair, prompt_ids: list[int]) -> tuple[list[int], float]:
    """The baseline: the target alone, one forward per token with a KV cache, same rule warp and seed.

    Greedy rules take argmax p; the sampling rule samples from the warped p with the same seeded
    generator. Returns (new token ids, seconds). Used for wall-clock speedups and as plain target
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
        if token in eos:
            break
    return committed[len(prompt_ids):], time.perf_counter() - started
