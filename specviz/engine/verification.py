"""Verification: what the ONE target pass and the rule make of a proposal, a chain or a tree.

Glossary (the words of vLLM's rejection sampler; Leviathan et al. 2023, Alg. 1; Chen et al. 2023):

- **accepted**: the drafted tokens the rule keeps, from the first one up to the first rejection;
- **correction** (vLLM: recovered token): after the first rejection, the token the target emits in its
  place, from the rule's correction distribution (argmax p for greedy and top-β + τ, a draw from the residual
  norm(max(0, p - q)) for speculative sampling; trees: from the last sibling's, Jeon et al. 2024), recorded with
  the source the rule declares;
- **bonus**: after a fully accepted proposal, one more token from the target's p at the next position,
  free because the same pass computed it.

A round emits its accepted tokens and exactly one correction or bonus, unless an EOS cuts it short.

Tensor arguments (V: the ids both models score; k: drafted tokens of a chain; n: nodes of a tree, the
root, i.e. the last committed token, included), all float32 on the CPU:

- chain: ``target_probs``: k + 1 tensors (V,), entry i the target's p after the prefix and the first i
  drafted tokens; ``block.draft_probs``: k tensors (V,), the q each drafted token was drawn from;
- tree: :func:`score_tree`'s logits (n, V), row 0 at the root and row j at node j; ``target_probs`` the
  n rows as (V,) tensors; ``tree.draft_probs``: node -> (V,), the q its children were drawn from.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from specviz.config import DecodeConfig
from specviz.drafters.base import DraftBlock, DraftTree
from specviz.drafters.tree import tree_attention
from specviz.engine.records import SiblingCheck, draft_position, emitted_token, tree_after_checks, tree_record
from specviz.engine.token_texts import TokenTexts
from specviz.engine.trace import NOT_VERIFIED, DraftPosition, EmittedToken, TreeRecord
from specviz.rules.acceptance import RESIDUAL, TARGET, Rule, check_block
from specviz.runtime import ForwardFn, KVCachedSequence, LoadedModel, StatesForwardFn


@dataclass(frozen=True)
class Outcome:
    """A proposal's verification: every check in walk order, the correction or the bonus, the accepted path.

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


def walk_chain(
    block: DraftBlock,
    target_probs: list[torch.Tensor],
    rule: Rule,
    generator: torch.Generator,
    texts: TokenTexts,
    top_n: int,
) -> Outcome:
    """Check the k drafted tokens left to right up to the first rejection, then take the correction (from
    the rejected position's p and q) or the bonus (from p after the last drafted token)."""
    verdicts = check_block(rule, block.token_ids, target_probs, block.draft_probs, generator)
    positions = [
        draft_position(i, token, target_probs[i], q_dist, verdict, rule, texts.after(block.token_ids[:i]), top_n)
        for i, (token, q_dist, verdict) in enumerate(zip(block.token_ids, block.draft_probs, verdicts))
    ]
    accepted = sum(p.accepted for p in positions)
    path = list(range(1, accepted + 1))
    rejected_at = next((i for i, v in enumerate(verdicts) if v is not None and not v.accepted), None)
    if rejected_at is None:
        p_dist = target_probs[len(block.token_ids)]
        bonus = emitted_token(
            rule.bonus(p_dist, generator), p_dist, p_dist, TARGET, texts.after(block.token_ids), top_n
        )
        return Outcome(positions, correction=None, bonus=bonus, accepted_path=path)
    p_dist, q_dist = target_probs[rejected_at], block.draft_probs[rejected_at]
    token = rule.correction(p_dist, q_dist, generator)
    drawn_from = rule.correction_distribution(p_dist, q_dist)
    at_rejection = texts.after(block.token_ids[:rejected_at])
    correction = emitted_token(token, drawn_from, p_dist, rule.correction_source, at_rejection, top_n, (p_dist, q_dist))
    return Outcome(positions, correction=correction, bonus=None, accepted_path=path)


def score_tree(
    state: KVCachedSequence,
    forward: ForwardFn | StatesForwardFn,
    loaded: LoadedModel,
    context: list[int],
    tree: DraftTree,
    vocab_size: int,
) -> torch.Tensor:
    """ONE target forward over the uncached context tail and every tree node: logits (1 + nodes, V),
    row 0 at the root, row j at node j."""
    tail = state.pending(context)
    cached = len(state.ids)
    nodes = list(range(1, len(tree.nodes)))
    layout = tree_attention(len(context), len(tail), tree, nodes, {}, cached)
    logits = state.feed(forward, loaded, tail + [tree.nodes[i].token_id for i in nodes], 1 + len(nodes), layout)
    return logits[:, :vocab_size]


def recursive_rejection(
    tree: DraftTree, target_probs: list[torch.Tensor], rule: Rule, generator: torch.Generator
) -> tuple[list[SiblingCheck], list[int]]:
    """Walk the tree from the root with the rule; return (checks, accepted path).

    At each node its children are checked in turn until one is accepted; after a rejection the next sibling
    is checked against the rule's :meth:`~specviz.rules.acceptance.Rule.next_sibling` (p, q): RSD's recursion
    for speculative sampling (p_{k+1} the residual, q_{k+1} without x_k; Jeon et al. 2024), the node's own p
    and q for the deterministic rules. The walk ends at an accepted node without children (a bonus follows) or
    where every child was rejected (a correction follows, from the last check's p and q).
    """
    checks: list[SiblingCheck] = []
    path: list[int] = []
    node = 0
    while children := tree.nodes[node].children:
        p_i, q_i = target_probs[node], tree.draft_probs[node]  # an expanded node's q: its children were drawn from it
        for child in children:
            token = tree.nodes[child].token_id
            checks.append(SiblingCheck(node, child, token, p_i, q_i, rule.check(token, p_i, q_i, generator)))
            if checks[-1].verdict.accepted:
                break
            p_i, q_i = rule.next_sibling(p_i, q_i, token)
        else:
            return checks, path
        path.append(node := child)
    return checks, path


def walk_tree(
    tree: DraftTree,
    target_probs: list[torch.Tensor],
    rule: Rule,
    generator: torch.Generator,
    texts: TokenTexts,
    config: DecodeConfig,
) -> Outcome:
    """Recursive rejection sampling from the root; then the bonus from p at an accepted leaf, or the rule's
    correction from the last check's (p, q) (under sampling: a draw from the last residual)."""
    checks, path = recursive_rejection(tree, target_probs, rule, generator)
    positions = [
        draft_position(
            tree.nodes[c.node].depth - 1,
            c.token_id,
            c.target_probs,
            c.draft_probs,
            c.verdict,
            rule,
            texts.after(tree.tokens_to(c.parent)),  # a sibling reads as it would after its parent's path
            config.top_n,
        )
        for c in checks
    ]
    end = path[-1] if path else 0
    node_p, after_path = target_probs[end], texts.after(tree.tokens_to(end))
    record = tree_record(tree, checks, path, target_probs, rule, texts, config)
    if not tree.nodes[end].children:  # an accepted leaf: the bonus
        bonus = emitted_token(rule.bonus(node_p, generator), node_p, node_p, TARGET, after_path, config.top_n)
        return Outcome(positions, correction=None, bonus=bonus, accepted_path=path, tree=record)
    last = checks[-1]
    token = rule.correction(last.target_probs, last.draft_probs, generator)
    drawn_from = rule.correction_distribution(last.target_probs, last.draft_probs)
    source = rule.correction_source
    rejected = (last.target_probs, last.draft_probs) if source == RESIDUAL else None
    correction = emitted_token(token, drawn_from, node_p, source, after_path, config.top_n, rejected)
    return Outcome(positions, correction=correction, bonus=None, accepted_path=path, tree=record)


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
