"""Verification: what the ONE target pass and the rule decide about a proposal, a chain or a tree.

The decision (:func:`decide_chain`, :func:`decide_tree`) is a pure function of the drafted tokens, the target's p,
the draft's q, the rule and the run's generator; :mod:`specviz.engine.records` describes it afterwards (texts,
top tokens, the tree's record).

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
  drafted tokens; ``draft_probs``: k tensors (V,), the q each drafted token was drawn from;
- tree: :func:`score_tree`'s logits (n, V), row 0 at the root and row j at node j; ``target_probs`` the
  n rows as (V,) tensors; ``tree.draft_probs``: node -> (V,), the q its children were drawn from.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specviz.drafters.base import DraftTree
from specviz.drafters.tree import tree_attention
from specviz.rules.acceptance import TARGET, Rule, Verdict, check_block
from specviz.runtime import ForwardFn, KVCachedSequence, LoadedModel, StatesForwardFn


@dataclass(frozen=True)
class Check:
    """One drafted token checked by the rule: ``node`` (a child of ``parent``) against ``target_probs`` p_i and
    ``draft_probs`` q_i, both (V,). In a chain node i + 1 is the i-th drafted token (its parent i) and (p_i, q_i) are
    that position's own; in a tree they are the recursive walk's (p, q) at this sibling (Jeon et al. 2024)."""

    parent: int
    node: int
    token_id: int
    target_probs: torch.Tensor
    draft_probs: torch.Tensor
    verdict: Verdict


@dataclass(frozen=True)
class Decision:
    """What the rule decided about one proposal, before anything is described.

    ``checks``: every check made, in walk order (a chain's stop at its first rejection; the tokens after it are
    never checked); ``accepted_path``: the accepted nodes from the top (a chain's: ``[1, ..., accepted]``);
    ``token_id``: the one token emitted after them, a correction (after a rejection: from the rule's correction
    distribution of the last check's (p, q)) or the bonus (from p at the path's end); ``source``: what it was drawn
    from, :data:`~specviz.rules.acceptance.TARGET` for a bonus, the rule's ``correction_source`` for a correction.
    """

    checks: list[Check]
    accepted_path: list[int]
    token_id: int
    source: str

    @property
    def corrected(self) -> bool:
        """Whether ``token_id`` is a correction: the last check rejected its token."""
        return bool(self.checks) and not self.checks[-1].verdict.accepted


def correction_or_bonus(
    checks: list[Check], accepted_path: list[int], p_at_end: torch.Tensor, rule: Rule, generator: torch.Generator
) -> Decision:
    """The decision closed by its one extra token: after a rejection the correction from the last check's (p, q)
    (argmax p, or a draw from the residual norm(max(0, p - q)) under speculative sampling: Leviathan et al. 2023,
    Alg. 1), else the bonus from ``p_at_end`` (V,), p after the accepted path, which the same pass computed."""
    if not checks or checks[-1].verdict.accepted:
        return Decision(checks, accepted_path, rule.bonus(p_at_end, generator), TARGET)
    rejected = checks[-1]
    token = rule.correction(rejected.target_probs, rejected.draft_probs, generator)
    return Decision(checks, accepted_path, token, rule.correction_source)


def decide_chain(
    token_ids: list[int],
    target_probs: list[torch.Tensor],
    draft_probs: list[torch.Tensor],
    rule: Rule,
    generator: torch.Generator,
) -> Decision:
    """Speculative decoding's decision on a chain of k drafted tokens (Leviathan et al. 2023, Alg. 1).

    Each token x_i is checked left to right up to the first rejection (speculative sampling: accepted iff
    u_i < min(1, p_i(x_i) / q_i(x_i)), u_i ~ U(0, 1) from ``generator``; greedy: iff x_i = argmax p_i); then the
    correction from (p_i, q_i) at the rejected position, or the bonus from p_k after a fully accepted chain.

    Args:
        token_ids: the k drafted tokens.
        target_probs: k + 1 tensors (V,), entry i the target's p after the prefix and the first i drafted tokens.
        draft_probs: k tensors (V,), the q each drafted token was drawn from.
        rule: the verification rule.
        generator: the run's random stream; its draws are the checks' in order, then the correction's or bonus's.

    Returns:
        The :class:`Decision`: the checks made, ``[1, ..., accepted]``, the correction or the bonus.
    """
    verdicts = check_block(rule, token_ids, target_probs, draft_probs, generator)
    checks = [
        Check(i, i + 1, token, target_probs[i], draft_probs[i], verdict)
        for i, (token, verdict) in enumerate(zip(token_ids, verdicts))
        if verdict is not None
    ]
    accepted = sum(c.verdict.accepted for c in checks)
    return correction_or_bonus(checks, list(range(1, accepted + 1)), target_probs[accepted], rule, generator)


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
) -> tuple[list[Check], list[int]]:
    """Walk the tree from the root with the rule; return (checks, accepted path).

    At each node its children are checked in turn until one is accepted; after a rejection the next sibling
    is checked against the rule's :meth:`~specviz.rules.acceptance.Rule.next_sibling` (p, q): RSD's recursion
    for speculative sampling (p_{k+1} the residual, q_{k+1} without x_k; Jeon et al. 2024), the node's own p
    and q for the deterministic rules. A child drawn alone from its own q (``tree.drawn_from``) is checked against
    that q and the p its rejected siblings left (SpecInfer's multi-step speculative sampling, Miao et al. 2024). The
    walk ends at an accepted node without children (a bonus follows) or where every child was rejected (a correction
    follows, from the last check's p and q).
    """
    checks: list[Check] = []
    path: list[int] = []
    node = 0
    while children := tree.nodes[node].children:
        p_i, q_i = target_probs[node], tree.draft_probs.get(node)  # an expanded node's q: its children's draws
        for child in children:
            token, q_child = tree.nodes[child].token_id, tree.drawn_from.get(child, q_i)
            assert q_child is not None, "a child was drawn from its node's q or from its own"
            checks.append(Check(node, child, token, p_i, q_child, rule.check(token, p_i, q_child, generator)))
            if checks[-1].verdict.accepted:
                break
            p_i, q_i = rule.next_sibling(p_i, q_child, token)
        else:
            return checks, path
        path.append(node := child)
    return checks, path


def decide_tree(tree: DraftTree, target_probs: list[torch.Tensor], rule: Rule, generator: torch.Generator) -> Decision:
    """Recursive rejection sampling's decision on a tree (Jeon et al. 2024): :func:`recursive_rejection` from the
    root, then the bonus from p at an accepted leaf, or the correction from the last check's (p, q) (under
    sampling: a draw from the last residual).

    Args:
        tree: the drafted tree (``tree.draft_probs``: node -> (V,), the q its children were drawn from).
        target_probs: n tensors (V,), entry j the target's p after node j's path (entry 0 at the root).
        rule: the verification rule.
        generator: the run's random stream; its draws are the checks' in walk order, then the correction's or bonus's.

    Returns:
        The :class:`Decision`: the checks in walk order, the accepted path, the correction or the bonus.
    """
    checks, path = recursive_rejection(tree, target_probs, rule, generator)
    return correction_or_bonus(checks, path, target_probs[path[-1] if path else 0], rule, generator)
