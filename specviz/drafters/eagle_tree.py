"""EAGLE-2's dynamic draft tree (Li et al. 2024, arXiv 2406.16858, Sec. 4).

EAGLE-2's observation: the draft's confidence (its q of a token) approximates well how often the target accepts
it, so a path's value, the product of the draft's q along it, estimates the chance that the whole path is accepted.
The tree grows where that value is high instead of in a fixed shape:

* expand: at every level, the ``top_k`` new nodes of highest value are expanded; each gets its ``top_k`` most likely
  children (one head pass per level scores all expanded nodes at once, under a tree attention mask);
* rerank: of every node drafted, the ``budget`` of highest value form the tree the target verifies in ONE pass. A
  child's value never exceeds its parent's, so the kept nodes always form a tree.

Under the sampling rule the children are drawn without replacement from q (Gumbel-top-k) and values are the
conditioned Gumbel keys of stochastic beam search (Kool et al. 2019; used for RSD-S trees, Jeon et al. 2024), so
the kept siblings are always the first draws in order, as recursive rejection sampling needs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from specviz.drafters.base import DraftTree, TreeNode
from specviz.drafters.tree import beam_children, tree_attention
from specviz.rules.acceptance import Rule

if TYPE_CHECKING:
    from specviz.drafters.eagle import EagleDrafter


def dynamic_tree(
    drafter: EagleDrafter,
    context: list[int],
    root_feature: torch.Tensor,
    depth: int,
    rule: Rule,
    generator: torch.Generator,
) -> DraftTree:
    """Grow ``depth`` levels from the root (the context's last token, whose predicted feature is
    ``root_feature``), then keep the budget best nodes."""
    n = len(context) - 1  # the head's cache holds the exact rows 0 .. n-1; a depth-j node sits at position n - 1 + j
    root = TreeNode(index=0, parent=-1, depth=0, token_id=context[-1], draft_prob=1.0, sibling_rank=0)
    grown = DraftTree(
        nodes=[root], levels=[], draft_probs={0: drafter.q(root_feature[None], rule)[0]}, forward_passes=1
    )
    features, frontier = {0: root_feature}, [0]
    cache_index: dict[int, int] = {}  # node -> its row in the head's cache
    for level in range(depth):
        added = []
        for parent in frontier:
            for _, token, log_prob, key in beam_children(
                grown, [parent], grown.draft_probs, drafter.shape.eagle_top_k, rule.stochastic, generator
            ):
                node = TreeNode(
                    index=len(grown.nodes),
                    parent=parent,
                    depth=level + 1,
                    token_id=token,
                    draft_prob=float(grown.draft_probs[parent][token]),
                    sibling_rank=len(grown.nodes[parent].children),
                    log_prob=log_prob,
                    perturbed=key,
                )
                grown.nodes[parent].children.append(node.index)
                grown.nodes.append(node)
                added.append(node.index)
        grown.levels.append(added)
        if level == depth - 1 or not added:
            break
        frontier = sorted(added, key=lambda i: -grown.nodes[i].perturbed)[: drafter.shape.eagle_top_k]
        cached = drafter.state.cache.get_seq_length()
        layout = tree_attention(n, 0, grown, frontier, cache_index, cached)
        predicted = drafter.step(
            torch.stack([features[grown.nodes[i].parent] for i in frontier]),
            [grown.nodes[i].token_id for i in frontier],
            layout.positions,
            layout,
        )
        cache_index.update({node: cached + j for j, node in enumerate(frontier)})
        for index, feature, q in zip(frontier, predicted, drafter.q(predicted, rule)):
            features[index], grown.draft_probs[index] = feature, q
        grown.forward_passes += 1
    return reranked(grown, drafter.shape.eagle_budget)


def reranked(grown: DraftTree, budget: int) -> DraftTree:
    """The ``budget`` nodes of highest value (ties: the shallower first), renumbered by depth, with their q's."""
    order = sorted(range(1, len(grown.nodes)), key=lambda i: (-grown.nodes[i].perturbed, grown.nodes[i].depth, i))
    kept = {0}
    for index in order:
        if len(kept) > budget:
            break
        if grown.nodes[index].parent in kept:
            kept.add(index)
    renumbered = {old: new for new, old in enumerate(sorted(kept, key=lambda i: (grown.nodes[i].depth, i)))}
    nodes: list[TreeNode] = []
    for old, new in sorted(renumbered.items(), key=lambda item: item[1]):
        node = grown.nodes[old]
        parent = renumbered.get(node.parent, -1)
        rank = len(nodes[parent].children) if parent >= 0 else 0
        nodes.append(
            TreeNode(
                index=new,
                parent=parent,
                depth=node.depth,
                token_id=node.token_id,
                draft_prob=node.draft_prob,
                sibling_rank=rank,
                log_prob=node.log_prob,
                perturbed=node.perturbed,
            )
        )
        if parent >= 0:
            nodes[parent].children.append(new)
    levels = [[node.index for node in nodes if node.depth == d] for d in range(1, max(n.depth for n in nodes) + 1)]
    draft_probs = {
        renumbered[old]: q
        for old, q in grown.draft_probs.items()
        if old in renumbered and nodes[renumbered[old]].children
    }
    return DraftTree(nodes=nodes, levels=levels, draft_probs=draft_probs, forward_passes=grown.forward_passes)
