"""What a round records (verification decides, :mod:`specviz.engine.verification`; these describe the decision
afterwards): drafted positions with their verdicts, the tokens the target emitted, the tree, the run's stats."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from specviz.config import DecodeConfig
from specviz.drafters.base import DraftBlock, DraftTree
from specviz.engine.token_texts import TokenTexts
from specviz.engine.trace import (
    ACCEPTED,
    NOT_VERIFIED,
    REJECTED,
    DraftPosition,
    DraftStatus,
    EmittedToken,
    Round,
    Stats,
    TopTokens,
    TreeNodeRecord,
    TreeRecord,
)
from specviz.engine.verification import Check, Decision
from specviz.models.pair import ModelPair, uses_draft_model
from specviz.rules.acceptance import RESIDUAL, TARGET, Rule, Verdict
from specviz.rules.distributions import overlap, residual_distribution


@dataclass(frozen=True)
class Outcome:
    """A proposal's verification as recorded: every check in walk order, the correction or the bonus, the accepted
    path.

    ``accepted_path``: the proposal's accepted nodes from the top (a chain's are ``[1, ..., accepted]``);
    ``tree``: the tree's record (trees only).
    """

    positions: list[DraftPosition]
    correction: EmittedToken | None
    bonus: EmittedToken | None
    accepted_path: list[int]
    tree: TreeRecord | None = None

    @property
    def emitted_ids(self) -> list[int]:
        """The accepted tokens, then the correction or the bonus."""
        extra = [t.token_id for t in (self.correction, self.bonus) if t]
        return [p.token_id for p in self.positions if p.accepted] + extra


def status_of(verdict: Verdict | None) -> DraftStatus:
    """A drafted token's recorded status: accepted, rejected, or not verified (after a rejection)."""
    return NOT_VERIFIED if verdict is None else ACCEPTED if verdict.accepted else REJECTED


def draft_position(
    index: int,
    token: int,
    p_dist: torch.Tensor,
    q_dist: torch.Tensor,
    verdict: Verdict | None,
    rule: Rule,
    texts: "TokenTexts",
    top_n: int,
) -> DraftPosition:
    """The record of one drafted token checked with ``verdict`` (None: never checked)."""
    status = status_of(verdict)
    return DraftPosition(
        index=index,
        token_id=token,
        text=texts(token),
        p=float(p_dist[token]),
        q=float(q_dist[token]),
        accept_prob=verdict.accept_prob if verdict else 0.0,
        uniform=verdict.uniform if verdict else None,
        status=status,
        overlap=overlap(p_dist, q_dist),
        alpha=rule.acceptance_alpha(p_dist, q_dist),
        target_top=texts.top(p_dist, top_n),
        draft_top=texts.top(q_dist, top_n),
        candidates=None if (ids := rule.candidates(p_dist)) is None else texts.of(ids, p_dist),
        tau_gap=verdict.tau_gap if verdict else None,
    )


def tree_record(
    tree: DraftTree,
    checks: list[Check],
    path: list[int],
    target_probs: list[torch.Tensor],
    rule: Rule,
    texts: TokenTexts,
    top_n: int,
) -> TreeRecord:
    """The tree as drawn: every node with its status, text and top tokens, the accepted path, and the residual
    bars of the rejected checks."""
    status = {c.node: ACCEPTED if c.verdict.accepted else REJECTED for c in checks}
    # a node reads as the text after its parent's path; its children's candidates, after its own path
    after = {n.index: texts.after(tree.tokens_to(n.index)) for n in tree.nodes}
    nodes = [
        TreeNodeRecord(
            index=n.index,
            parent=n.parent,
            depth=n.depth,
            token_id=n.token_id,
            text=(after[n.parent] if n.index else texts)(n.token_id),
            q=n.draft_prob,
            sibling_rank=n.sibling_rank,
            status=ACCEPTED if n.index == 0 else status.get(n.index, NOT_VERIFIED),
            draft_top=after[n.index].top(tree.draft_probs[n.index], top_n) if n.index in tree.draft_probs else None,
            target_top=after[n.index].top(target_probs[n.index], top_n),
            source=n.source,
        )
        for n in tree.nodes
    ]
    residuals = [  # under a rule that corrects from the residual, the next sibling's p_{i+1} (Jeon et al. 2024)
        None
        if c.verdict.accepted or rule.correction_source != RESIDUAL
        else after[c.parent].top(rule.correction_distribution(c.target_probs, c.draft_probs), top_n)
        for c in checks
    ]
    return TreeRecord(
        nodes=nodes,
        levels=tree.levels,
        path=path,
        check_nodes=[c.node for c in checks],
        residual_tops=residuals,
    )


def describe_chain(
    block: DraftBlock, target_probs: list[torch.Tensor], decision: Decision, rule: Rule, texts: TokenTexts, top_n: int
) -> Outcome:
    """The record of a chain's decision (:func:`~specviz.engine.verification.decide_chain`): every drafted position
    (those after the first rejection not verified), each read as the text after the tokens before it, then the
    correction or the bonus.

    Args:
        block: the drafted chain (k tokens, the q (V,) each was drawn from).
        target_probs: k + 1 tensors (V,), entry i the target's p after the first i drafted tokens.
        decision: what the rule decided about ``block``.
        rule: the rule that decided (its α, candidates and correction distribution are recorded).
        texts: the texts after the round's committed context.
        top_n: how many top tokens each distribution records.

    Returns:
        The round's :class:`Outcome` (no tree).
    """
    verdicts: list[Verdict | None] = [c.verdict for c in decision.checks]
    verdicts += [None] * (block.size - len(verdicts))
    positions = [
        draft_position(i, token, target_probs[i], q_dist, verdict, rule, texts.after(block.token_ids[:i]), top_n)
        for i, (token, q_dist, verdict) in enumerate(zip(block.token_ids, block.draft_probs, verdicts))
    ]
    end = len(decision.accepted_path)
    after_path = texts.after(block.token_ids[:end])
    extra = extra_token(decision, target_probs[end], rule, after_path, top_n, residual_shown=True)
    return outcome_of(decision, positions, extra)


def describe_tree(
    tree: DraftTree, target_probs: list[torch.Tensor], decision: Decision, rule: Rule, texts: TokenTexts, top_n: int
) -> Outcome:
    """The record of a tree's decision (:func:`~specviz.engine.verification.decide_tree`): each check as a drafted
    position (a sibling reads as it would after its parent's path), the tree's record, then the correction or the
    bonus after the accepted path.

    Args:
        tree: the drafted tree (n nodes, the root included).
        target_probs: n tensors (V,), entry j the target's p after node j's path.
        decision: what the rule decided about ``tree``.
        rule: the rule that decided.
        texts: the texts after the round's committed context.
        top_n: how many top tokens each distribution records.

    Returns:
        The round's :class:`Outcome` with its :class:`~specviz.engine.trace.TreeRecord`.
    """
    positions = [
        draft_position(
            tree.nodes[c.node].depth - 1,
            c.token_id,
            c.target_probs,
            c.draft_probs,
            c.verdict,
            rule,
            texts.after(tree.tokens_to(c.parent)),
            top_n,
        )
        for c in decision.checks
    ]
    end = decision.accepted_path[-1] if decision.accepted_path else 0
    after_path = texts.after(tree.tokens_to(end))
    extra = extra_token(decision, target_probs[end], rule, after_path, top_n, rule.correction_source == RESIDUAL)
    record = tree_record(tree, decision.checks, decision.accepted_path, target_probs, rule, texts, top_n)
    return outcome_of(decision, positions, extra, record)


def extra_token(
    decision: Decision, p_at_end: torch.Tensor, rule: Rule, texts: TokenTexts, top_n: int, residual_shown: bool
) -> EmittedToken:
    """The record of the decision's correction (drawn from the rule's correction distribution of the rejected
    check's (p, q)) or bonus (drawn from ``p_at_end``, p after the accepted path); ``residual_shown``: whether a
    correction records the rejected check's residual (a chain's always; a tree's under a rule that corrects from it,
    as its residual bars)."""
    if not decision.corrected:
        return emitted_token(decision.token_id, p_at_end, p_at_end, TARGET, texts, top_n)
    rejected = decision.checks[-1].target_probs, decision.checks[-1].draft_probs
    drawn_from = rule.correction_distribution(*rejected)
    shown = rejected if residual_shown else None
    return emitted_token(decision.token_id, drawn_from, p_at_end, decision.source, texts, top_n, shown)


def outcome_of(
    decision: Decision, positions: list[DraftPosition], extra: EmittedToken, tree: TreeRecord | None = None
) -> Outcome:
    """The outcome with ``extra`` as the decision's correction or bonus."""
    return Outcome(
        positions,
        correction=extra if decision.corrected else None,
        bonus=None if decision.corrected else extra,
        accepted_path=decision.accepted_path,
        tree=tree,
    )


def models_info(pair: ModelPair, config: DecodeConfig) -> dict[str, str | int]:
    target = pair.target
    draft_name = pair.draft.name if pair.draft else f"the {config.drafter} drafter, built from the target itself"
    info: dict[str, str | int] = {
        "target": target.name,
        "draft": draft_name,
        "device": str(target.device),
        "dtype": target.precision,  # as loaded (int8 and int4 compute in float32 around their integer products)
    }
    if pair.draft and uses_draft_model(config):
        info["draft_dtype"] = pair.draft.precision  # the draft's own precision (the target's decides exactness)
        info["draft_vocab"] = (
            pair.draft.draft_head_size(config.draft_vocab) or pair.vocab_size
        )  # tokens the draft's head scores
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
        mean_acceptance_length=(
            1 + accepted / drafting if (drafting := sum(r.drafted_count > 0 for r in rounds)) else 1.0
        ),
        stop_reason=stop_reason,
        wall_ms=wall_ms,
        tokens_per_s=new_tokens / (wall_ms / 1e3) if wall_ms > 0 else 0.0,
    )


def emitted_token(
    token: int,
    drawn_from: torch.Tensor,
    target_p: torch.Tensor,
    source: str,
    texts: TokenTexts,
    top_n: int,
    rejected: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> EmittedToken:
    """The record of a token the target emitted, ``drawn_from`` a distribution (V,) (``source``: what the rule
    declares it drew from, :data:`~specviz.rules.acceptance.TARGET` for p itself, ``RESIDUAL`` for
    norm(max(0, p - q))); ``rejected``: the (p, q) of the check a correction replaces,
    whose residual is recorded with each of its top tokens' p and q (what the round view draws)."""
    top: TopTokens | None = None
    residual_p: list[float] | None = None
    residual_q: list[float] | None = None
    if rejected is not None:
        p, q = rejected
        top = texts.top(residual_distribution(p, q), top_n)
        residual_p, residual_q = [float(p[i]) for i in top.ids], [float(q[i]) for i in top.ids]
    return EmittedToken(
        token_id=token,
        text=texts(token),
        prob=float(drawn_from[token]),
        target_prob=float(target_p[token]),
        source=source,
        distribution_top=texts.top(drawn_from, top_n),
        target_top=texts.top(target_p, top_n),
        residual_top=top,
        residual_p=residual_p,
        residual_q=residual_q,
    )


def tree_after_checks(tree: TreeRecord, positions: list[DraftPosition]) -> TreeRecord:
    """The tree's record with node statuses, accepted path and residual bars following the checks' statuses."""
    nodes = list(tree.nodes)
    for node, pos in zip(tree.check_nodes, positions):
        nodes[node] = dataclasses.replace(nodes[node], status=pos.status)
    return dataclasses.replace(
        tree,
        nodes=nodes,
        path=[node for node, pos in zip(tree.check_nodes, positions) if pos.accepted],
        residual_tops=[top if pos.status == REJECTED else None for top, pos in zip(tree.residual_tops, positions)],
    )


def truncate_at_eos(outcome: Outcome, eos: set[int]) -> Outcome:
    """The outcome cut after its first emitted EOS: every check made after the accepted EOS (later accepted
    tokens; in a tree, deeper siblings too) becomes not verified, and no token is emitted after it."""
    emitted = outcome.emitted_ids
    stop = next((i for i, t in enumerate(emitted) if t in eos), None)
    if stop is None or stop == len(emitted) - 1:
        return outcome
    eos_check = [i for i, p in enumerate(outcome.positions) if p.accepted][stop]
    positions = outcome.positions[: eos_check + 1] + [
        dataclasses.replace(p, status=NOT_VERIFIED) for p in outcome.positions[eos_check + 1 :]
    ]
    tree = tree_after_checks(outcome.tree, positions) if outcome.tree else None
    return Outcome(positions, correction=None, bonus=None, accepted_path=outcome.accepted_path[: stop + 1], tree=tree)
