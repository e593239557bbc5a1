"""What a round records: drafted positions with their verdicts, the tree, the run's stats."""

from __future__ import annotations

import torch

from specviz.config import DecodeConfig
from specviz.drafters.model import draft_vocab_for
from specviz.drafters.tree import DraftTree
from specviz.engine.token_texts import TokenTexts
from specviz.engine.trace import (
    ACCEPTED,
    NOT_VERIFIED,
    REJECTED,
    DraftPosition,
    Round,
    Stats,
    TreeNodeRecord,
    TreeRecord,
)
from specviz.models.pair import ModelPair, uses_draft_model
from specviz.rules.acceptance import Rule, Verdict
from specviz.rules.distributions import overlap, residual_distribution


def status_of(verdict: Verdict | None) -> str:
    """A drafted token's recorded status: accepted, rejected, or not verified (after a rejection)."""
    return NOT_VERIFIED if verdict is None else ACCEPTED if verdict.accepted else REJECTED


def draft_position(index: int, token: int, p_dist: torch.Tensor, q_dist: torch.Tensor, verdict: Verdict | None,
                   rule: Rule, texts: "TokenTexts", top_n: int) -> DraftPosition:
    """The record of one drafted token checked with ``verdict`` (None: never checked)."""
    status = status_of(verdict)
    return DraftPosition(
        index=index, token_id=token, text=texts(token), p=float(p_dist[token]), q=float(q_dist[token]),
        accept_prob=verdict.accept_prob if verdict else 0.0, uniform=verdict.uniform if verdict else None,
        accepted=status == ACCEPTED, status=status, overlap=overlap(p_dist, q_dist),
        alpha=rule.acceptance_alpha(p_dist, q_dist),
        target_top=texts.top(p_dist, top_n), draft_top=texts.top(q_dist, top_n),
        candidates=None if (ids := rule.candidates(p_dist)) is None else texts.of(ids, p_dist),
        tau_gap=verdict.tau_gap if verdict else None,
    )


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


def models_info(pair: ModelPair, config: DecodeConfig) -> dict:
    target = pair.target
    draft_name = pair.draft.name if pair.draft else f"the {config.drafter} drafter, built from the target itself"
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
        mean_acceptance_length=(1 + accepted / drafting if (drafting := sum(r.drafted_count > 0 for r in rounds))
                                else 1.0),
        stop_reason=stop_reason,
        wall_ms=wall_ms,
        tokens_per_s=new_tokens / (wall_ms / 1e3) if wall_ms > 0 else 0.0,
    )
