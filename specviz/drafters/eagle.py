"""EAGLE: drafting on the target's own features, in a chain or EAGLE-2's dynamic tree (Li et al. 2024).

A round (EAGLE, arXiv 2401.15077, Fig. 5; EAGLE-2, arXiv 2406.16858, Sec. 4), with the context x_0 .. x_n, where
the run's verification passes have already given the target's features f_0 .. f_{n-1} (x_n, the last correction or
bonus, has none yet):

1. catch up: feed the head the positions it has not seen with EXACT features, (f_i, e(x_{i+1})) for the newly
   accepted i; its cache entries fed with its own predicted features in the last round are dropped first. The last
   row gives f^_n and q over x_{n+1}: every round drafts from the target's feature at the last accepted token.
2. chain: draw d_1 ~ q, feed (f^_n, e(d_1)) for f^_{n+1} and q over d_2, ... (one head pass per token);
   dynamic tree: expand the ``top_k`` nodes of each level whose path confidence (the product of the draft's q along
   the path) is highest, ``top_k`` children each, one head pass per level with a tree attention mask; then keep the
   ``budget`` best nodes of the whole tree (EAGLE-2's rerank) for ONE tree-verification pass.
Every q is exactly the distribution its tokens were drawn from (a tree's children: without replacement, by
Gumbel-top-k under sampling; the conditioned Gumbel keys of stochastic beam search order a whole tree, Kool et al.
2019), so greedy stays the target's own output and sampling stays lossless under the rule's verification.
Round 1 drafts nothing: the target's features exist only after its first pass.

EAGLE-2's dynamic draft tree (Li et al. 2024, arXiv 2406.16858, Sec. 4).

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

import dataclasses
import json
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import DynamicCache

from specviz.drafters.base import DraftBlock, DraftTree, Proposal, TreeNode
from specviz.drafters.eagle_head import (
    MANIFEST_FILE,
    WEIGHTS_FILE,
    EagleHead,
    eagle_step,
    head_logits,
    load_head,
    trimmed_rows,
)
from specviz.drafters.tree import beam_children, grow_node, tree_attention
from specviz.models.loading import LoadedModel
from specviz.models.pair import ModelPair
from specviz.registry.drafter_settings import EagleSettings
from specviz.registry.shared_settings import DrafterShared
from specviz.rules.acceptance import Rule
from specviz.runtime.llama_step import LlamaWeights, causal_mask, llama_weights
from specviz.runtime.machine import device_wait
from specviz.runtime.protocol import KVCachedSequence, TreeLayout, common_prefix
from specviz.runtime.reference import states_forward
from specviz.settings import ConfigError


@dataclass
class EagleDrafter:
    """One run's EAGLE drafter: the shared head and target (read only) and this run's head cache.

    ``target_state`` is the run's target cache, whose ``states`` hold the target's features of every verified
    position. ``state`` is the head's own cache; its ``ids`` are the tokens fed with an EXACT feature (x_{i+1} at
    entry i), and the rows it drafted on its own features follow them in the cache until the next catch-up.
    """

    head: EagleHead
    target: LoadedModel
    weights: LlamaWeights
    target_state: KVCachedSequence
    head_ids: torch.Tensor
    head_rows: torch.Tensor
    vocab_size: int
    shape: EagleSettings = field(default_factory=EagleSettings)
    depth: int = 3
    state: KVCachedSequence = field(default_factory=KVCachedSequence)

    def step(
        self, features: torch.Tensor, tokens: list[int], positions: list[int], layout: TreeLayout | None = None
    ) -> torch.Tensor:
        """Predicted features (T, H) for T new rows (features (T, H), tokens, positions): causal after the cache, or
        placed by a tree layout."""
        device, cache = self.target.device, self.state.cache
        assert isinstance(cache, DynamicCache), "EAGLE's head grows its own cache (its step takes no static one)"
        allowed = layout.allowed.to(device) if layout else causal_mask(len(tokens), cache.get_seq_length(), device)
        with self.target.lock, torch.inference_mode():
            return eagle_step(
                self.head,
                self.weights,
                features[None].to(device),
                torch.tensor([tokens], device=device),
                torch.tensor(positions, device=device),
                allowed,
                cache,
            )[0]

    def q(self, predicted: torch.Tensor, rule: Rule) -> list[torch.Tensor]:
        """The draft's q (float32, CPU) for each predicted feature (T, H)."""
        logits = head_logits(predicted, self.head_ids, self.head_rows, self.vocab_size)
        return [rule.draft_distribution(row).cpu() for row in logits]

    def catch_up(self, context: list[int]) -> torch.Tensor | None:
        """Step 1: the head's cache brought to the exact features of positions 0 .. n-1; returns f^_n (H,), or None
        while the target has no features for this context (round 1)."""
        n = len(context) - 1
        states = self.target_state.states
        if n == 0 or states is None or len(states) < n or self.target_state.ids[:n] != context[:n]:
            return None
        keep = common_prefix(self.state.ids, context[1 : n + 1])
        if keep == n:  # the same context asked again (a round always grows it): re-feed its last row for f^_n
            keep -= 1
        self.state.crop(keep)  # drops stale rows and every row fed a predicted feature
        predicted = self.step(states[keep:n], context[keep + 1 : n + 1], list(range(keep, n)))
        self.state.ids = list(context[1 : n + 1])
        return predicted[-1]

    def propose(self, context: list[int], gamma: int, rule: Rule, generator: torch.Generator) -> Proposal:
        feature = self.catch_up(context) if gamma > 0 else None
        if feature is None:
            return DraftBlock(token_ids=[], draft_probs=[])
        if self.shape.eagle_tree:
            return dynamic_tree(self, context, feature, min(self.depth, gamma), rule, generator)
        block = DraftBlock(token_ids=[], draft_probs=[], forward_passes=1)
        position = len(context) - 1
        while True:
            draft_probs = self.q(feature[None], rule)[0]
            token = rule.draft_token(draft_probs, generator)
            block.token_ids.append(token)
            block.draft_probs.append(draft_probs)
            if block.size == gamma:
                return block
            feature = self.step(feature[None], [token], [position])[-1]
            block.forward_passes += 1
            position += 1

    def update(self, drafted: int, accepted_path: list[int]) -> None:
        """Nothing to keep: the next catch-up feeds the accepted tokens with the target's exact features."""


def build(
    settings: EagleSettings, shared: DrafterShared, pair: ModelPair, target_state: KVCachedSequence | None
) -> EagleDrafter:
    """The shipped head (or ``shared.parallel_weights``) for this target, with the run's target cache."""
    path = shared.parallel_weights or str(WEIGHTS_FILE)
    try:
        head, vocab_order = load_head(path, str(pair.target.device))
    except FileNotFoundError as exc:
        raise ConfigError(f"No EAGLE head at {path}: train one with `python -m specviz train-eagle`") from exc
    weights = llama_weights(pair.target.model)
    if weights is None:
        raise ConfigError(
            f"EAGLE runs its layer with the lean Llama step; {pair.target.name} is not a plain Llama "
            "or Qwen2 (use another drafter with this model)"
        )
    shape = head.shape
    if (shape.hidden, shape.heads, shape.kv_heads, shape.head_dim, shape.vocab) != (
        weights.embedding.embedding_dim,
        weights.heads,
        weights.kv_heads,
        weights.head_dim,
        pair.vocab_size,
    ):
        head_name = f"The EAGLE head at {path}" if shared.parallel_weights else "EAGLE's shipped head"
        raise ConfigError(
            f"{head_name} was trained for {shape.target} (hidden {shape.hidden}, vocabulary {shape.vocab}); "
            f"{pair.target.name} is not that model: pick another drafter for this pair"
        )
    k = head.shape.draft_vocab if shared.draft_vocab is None else shared.draft_vocab
    ids, rows = trimmed_rows(pair.target, path, min(k, len(vocab_order)) if k else 0)
    return EagleDrafter(
        head=head,
        target=pair.target,
        weights=weights,
        target_state=target_state if target_state is not None else KVCachedSequence(),
        head_ids=ids,
        head_rows=rows,
        vocab_size=pair.vocab_size,
        shape=settings,
        depth=shared.tree_depth,
    )


def caught_up(
    settings: EagleSettings, shared: DrafterShared, pair: ModelPair, prefix: list[int]
) -> tuple[EagleDrafter, torch.Tensor]:
    """A chain drafter caught up after ``prefix`` as a run that has verified it: (drafter, the predicted feature whose
    q scores the token after ``prefix``)."""
    state = KVCachedSequence()
    state.feed(states_forward, pair.target, list(prefix), 1)
    drafter = build(dataclasses.replace(settings, eagle_tree=False), shared, pair, state)
    feature = drafter.catch_up(list(prefix))
    assert feature is not None, "the target's features of the prefix were just fed (a prefix of two tokens or more)"
    return drafter, feature


def draft_logits_along(
    settings: EagleSettings, shared: DrafterShared, pair: ModelPair, prefix: list[int], draft_ids: list[int]
) -> torch.Tensor:
    """Logits (k, V) of the head at each token of a given draft after ``prefix``, drafting on its own features as a
    chain does (the first from the target's feature of prefix's last token)."""
    drafter, feature = caught_up(settings, shared, pair, prefix)
    features = [feature]
    for i, token in enumerate(draft_ids[:-1]):
        features.append(drafter.step(features[-1][None], [token], [len(prefix) - 1 + i])[-1])
    return head_logits(torch.stack(features), drafter.head_ids, drafter.head_rows, pair.vocab_size)


def ms_per_drafted_token(
    settings: EagleSettings, shared: DrafterShared, pair: ModelPair, prefix: list[int], repeats: int, rule: Rule
) -> float:
    """Milliseconds of one chain step (a head pass on one token and its q under ``rule``), median of ``repeats`` after
    a warm-up."""
    drafter, feature = caught_up(settings, shared, pair, prefix)
    cached = drafter.state.cache.get_seq_length()

    def one_step() -> float:
        device_wait(pair.target.device)
        started = time.perf_counter()
        drafter.q(drafter.step(feature[None], [prefix[-1]], [cached]), rule)
        device_wait(pair.target.device)  # timed to its end on the device, not its launches
        drafter.state.crop(cached)
        return (time.perf_counter() - started) * 1e3

    one_step()
    return statistics.median(one_step() for _ in range(repeats))


def shipped_weights(name: str) -> dict[str, Any] | None:
    """The shipped EAGLE head, described from its manifest (None where none is shipped)."""
    if not MANIFEST_FILE.is_file():
        return None
    manifest = json.loads(MANIFEST_FILE.read_text(encoding="utf-8"))
    return dict(
        drafter=name,
        file=f"specviz/weights/{WEIGHTS_FILE.name}",
        size_mb=round(WEIGHTS_FILE.stat().st_size / 1e6, 2),
        steps=manifest["steps"],
        seed=manifest["settings"]["seed"],
        command=manifest["command"],
        heldout_acceptance=round(manifest["heldout"]["acceptance"], 3),
    )


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
                added.append(grow_node(grown, parent, token, log_prob, key))
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
