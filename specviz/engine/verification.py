"""Verification: what the ONE target pass and the rule make of a proposal, a chain or a tree.

Glossary (the words of vLLM's rejection sampler; Leviathan et al. 2023, Alg. 1; Chen et al. 2023):

- **accepted**: the drafted tokens the rule keeps, from the first one up to the first rejection;
- **correction** (vLLM: recovered token): after the first rejection, the token the target emits in its
  place: argmax p for greedy and top-β + τ, a draw from the residual norm(max(0, p - q)) for speculative
  sampling (trees: from the last sibling's residual, Jeon et al. 2024);
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
from specviz.engine.records import draft_position, emitted_token, tree_after_checks, tree_record
from specviz.engine.token_texts import TokenTexts
from specviz.engine.trace import NOT_VERIFIED, DraftPosition, EmittedToken, TreeRecord
from specviz.models.forwards import ForwardFn, KVCachedSequence, StatesForwardFn
from specviz.models.loading import LoadedModel
from specviz.rules.acceptance import Rule, Verdict, check_block
from specviz.rules.distributions import residual_distribution


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
            rule.bonus(p_dist, generator), p_dist, p_dist, "target", texts.after(block.token_ids), top_n
        )
        return Outcome(positions, correction=None, bonus=bonus, accepted_path=path)
    p_dist, q_dist = target_probs[rejected_at], block.draft_probs[rejected_at]
    token = rule.correction(p_dist, q_dist, generator)
    drawn_from, source = (residual_distribution(p_dist, q_dist), "residual") if rule.stochastic else (p_dist, "target")
    at_rejection = texts.after(block.token_ids[:rejected_at])
    correction = emitted_token(token, drawn_from, p_dist, source, at_rejection, top_n, (p_dist, q_dist))
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


def remove_and_renormalise(draft_probs: torch.Tensor, token: int) -> torch.Tensor:
    """q with a drawn sibling removed: the distribution of the next draw without replacement."""
    rest = draft_probs.clone()
    rest[token] = 0.0
    total = rest.sum()
    return rest / total if total > 0 else rest


@dataclass
class SiblingCheck:
    """One step of the recursive rejection walk."""

    parent: int
    node: int
    token_id: int
    target_probs: torch.Tensor  # p_i at this step
    draft_probs: torch.Tensor  # q_i at this step
    verdict: Verdict


def recursive_rejection(
    tree: DraftTree, target_probs: list[torch.Tensor], rule: Rule, generator: torch.Generator
) -> tuple[list[SiblingCheck], list[int], torch.Tensor, bool]:
    """Walk the tree from the root with the rule; return (checks, accepted path, final p, leaf).

    For the sampling rule the per-sibling distributions follow RSD's recursion (p_{i+1} residual,
    q_{i+1} without x_i); deterministic rules check every sibling against the node's own p. The token
    after the path is ``rule.bonus(final p)``: a sample from the last residual (or from p at an
    accepted leaf) for sampling, the target's argmax for the deterministic rules. ``leaf`` is True
    when the walk ended at an accepted node without children (a bonus token).
    """
    checks: list[SiblingCheck] = []
    path: list[int] = []
    node = 0
    while True:
        p_i = target_probs[node]
        children = tree.nodes[node].children
        if not children:
            return checks, path, p_i, True
        q_i = tree.draft_probs[node]  # an expanded node's q: its children were drawn from it
        accepted = None
        for child in children:
            token = tree.nodes[child].token_id
            verdict = rule.check(token, p_i, q_i, generator)
            checks.append(SiblingCheck(node, child, token, p_i, q_i, verdict))
            if verdict.accepted:
                accepted = child
                break
            if rule.stochastic:
                p_i, q_i = _residual_step(p_i, q_i, token)
        if accepted is None:
            return checks, path, p_i, False
        path.append(accepted)
        node = accepted


def _residual_step(p_i: torch.Tensor, q_i: torch.Tensor, token: int) -> tuple[torch.Tensor, torch.Tensor]:
    return residual_distribution(p_i, q_i), remove_and_renormalise(q_i, token)


def walk_tree(
    tree: DraftTree,
    target_probs: list[torch.Tensor],
    rule: Rule,
    generator: torch.Generator,
    texts: TokenTexts,
    config: DecodeConfig,
) -> Outcome:
    """Recursive rejection sampling from the root; the token after the accepted path is drawn from the
    walk's final p (the last residual after a rejection under sampling; p at an accepted leaf: the bonus)."""
    checks, path, final_p, leaf = recursive_rejection(tree, target_probs, rule, generator)
    positions = [
        draft_position(
            tree.nodes[c.node].depth - 1,
            c.token_id,
            c.target_probs,
            c.draft_probs,
            c.verdict,
            rule,
            texts,
            config.top_n,
        )
        for c in checks
    ]
    from_residual = rule.stochastic and not leaf
    emitted = emitted_token(
        rule.bonus(final_p, generator),
        final_p,
        target_probs[path[-1] if path else 0],
        "residual" if from_residual else "target",
        texts,
        config.top_n,
        (checks[-1].target_probs, checks[-1].draft_probs) if from_residual else None,
    )
    record = tree_record(tree, checks, path, target_probs, rule, texts, config)
    if leaf:
        return Outcome(positions, correction=None, bonus=emitted, accepted_path=path, tree=record)
    return Outcome(positions, correction=emitted, bonus=None, accepted_path=path, tree=record)


def truncate_at_eos(outcome: Outcome, eos: set[int]) -> Outcome:
    """The outcome cut after its first emitted EOS: every check made after the accepted EOS (later accepted
    tokens; in a tree, deeper siblings too) becomes not verified, and no token is emitted after it."""
    emitted = outcome.emitted_ids
    stop = next((i for i, t in enumerate(emitted) if t in eos), None)
    if stop is None or stop == len(emitted) - 1:
        return outcome
    eos_check = [i for i, p in enumerate(outcome.positions) if p.accepted][stop]
    positions = outcome.positions[: eos_check + 1] + [
        dataclasses.replace(p, accepted=False, status=NOT_VERIFIED) for p in outcome.positions[eos_check + 1 :]
    ]
    tree = tree_after_checks(outcome.tree, positions) if outcome.tree else None
    return Outcome(positions, correction=None, bonus=None, accepted_path=outcome.accepted_path[: stop + 1], tree=tree)
