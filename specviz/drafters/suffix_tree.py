"""SuffixDecoding's index (Oliaro et al., NeurIPS 2025, arXiv 2411.04975): every suffix of the token sequences seen,
up to a depth, with how often each continuation followed; and the speculation tree it proposes after a context.

Pure Python over token ids (no torch): :class:`SuffixTrie` holds the sequences, :meth:`SuffixTrie.speculate` matches
the longest suffix of a context (the pattern, of length m) and grows a tree below it best first, scoring each
candidate node by the empirical probability of its path, the product of count(child) / count(children of its parent)
along it (the paper's Eq. 1-2), up to MAX_SPEC = α · m nodes (the paper's adaptive speculation length, Sec. 3.2) and
never a node whose score falls below a floor. The trie of the prompt and the answer so far is prompt lookup
(Saxena 2023) grown into a tree; the trie of every earlier output is SuffixDecoding's global tree.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field


@dataclass(slots=True)
class TrieNode:
    """A pattern's node: how many times the pattern occurred, and the node of each token that followed it."""

    count: int = 0
    children: dict[int, TrieNode] = field(default_factory=dict)

    @property
    def followed(self) -> int:
        """How many occurrences of the pattern had a next token (the denominator of its children's probabilities)."""
        return sum(child.count for child in self.children.values())


@dataclass(frozen=True)
class Speculation:
    """A speculation tree (:class:`Candidate` nodes, best first) and the length of the pattern it grew from, of the
    longest a trie matches."""

    candidates: list[Candidate]
    matched: int
    longest_pattern: int

    @property
    def expected(self) -> float:
        """The tokens this tree expects to have accepted: the sum of its nodes' path scores (each node is accepted with
        about its path's probability, the paper's score for choosing between trees), discounted by the share of the
        longest pattern matched: a continuation seen once after two matching tokens is weak evidence, after twelve a
        copy."""
        return sum(c.score for c in self.candidates) * min(1.0, self.matched / self.longest_pattern)


@dataclass(frozen=True)
class Candidate:
    """A node of a speculation tree: ``token`` after its ``parent`` (an index into the same list, -1: after the
    context), ``score`` the empirical probability of the path from the context down to it."""

    parent: int
    token: int
    score: float


class SuffixTrie:
    """The suffixes of every sequence added, each cut to ``depth`` tokens: a suffix tree bounded in depth, appended to
    token by token (each new token extends the ``depth`` suffixes that end at its sequence's last token). A pattern is
    matched over at most ``longest_pattern`` tokens, so ``depth - longest_pattern`` levels always follow a match."""

    def __init__(self, longest_pattern: int, depth: int) -> None:
        assert depth > longest_pattern, "a match leaves levels to speculate"
        self.longest_pattern = longest_pattern
        self.depth = depth
        self.root = TrieNode()
        self.tokens = 0
        self._ends: dict[object, list[TrieNode]] = {}  # per sequence: the nodes of its suffixes of length 1..depth

    def extend(self, sequence: object, tokens: list[int]) -> None:
        """Append ``tokens`` to the sequence named ``sequence`` (a new name starts a new sequence)."""
        ends = self._ends.get(sequence, [])
        for token in tokens:
            ends = [self._child(node, token) for node in [self.root, *ends[: self.depth - 1]]]
        self._ends[sequence] = ends
        self.tokens += len(tokens)

    @staticmethod
    def _child(node: TrieNode, token: int) -> TrieNode:
        child = node.children.setdefault(token, TrieNode())
        child.count += 1
        return child

    def longest_match(self, context: list[int]) -> tuple[TrieNode, int]:
        """The node of the longest suffix of ``context`` (at most ``longest_pattern`` tokens) that occurred with a
        continuation, and its length m (the root and 0 where none did)."""
        for length in range(min(self.longest_pattern, len(context)), 0, -1):
            node: TrieNode | None = self.root
            for token in context[-length:]:
                node = node.children.get(token) if node else None
            if node and node.children:
                return node, length
        return self.root, 0

    def speculate(self, context: list[int], alpha: float, max_nodes: int, depth: int, floor: float) -> Speculation:
        """The speculation tree after ``context``, best first (Oliaro et al. 2025, Alg. 1's expansion).

        Args:
            context: the token ids so far; its longest suffix found in the trie is the pattern.
            alpha: α, nodes allowed per matched token (MAX_SPEC = α · m).
            max_nodes: a ceiling on the nodes whatever the match (the target verifies every one of them).
            depth: the deepest a path may go (the round's γ; at most the levels the trie keeps below the match).
            floor: the lowest path score a node may have (the paper's minimum token probability).

        Returns:
            The :class:`Speculation`: the candidates in the order they were chosen (a parent always before its
            children), each with its score, none where nothing matched; and the match's length.
        """
        matched, length = self.longest_match(context)
        budget, depth = min(max_nodes, int(alpha * length)), min(depth, self.depth - length)
        chosen: list[Candidate] = []
        frontier: list[tuple[float, int, int, int, int, TrieNode]] = []  # (-score, tie, parent, level, token, node)
        ties = itertools.count()  # equal scores: the first offered first

        def offer(node: TrieNode, parent: int, level: int, score: float) -> None:
            total = node.followed
            for token, child in node.children.items():
                child_score = score * child.count / total
                if child_score >= floor and level < depth:
                    heapq.heappush(frontier, (-child_score, next(ties), parent, level + 1, token, child))

        offer(matched, -1, 0, 1.0)
        while frontier and len(chosen) < budget:
            negative, _, parent, level, token, node = heapq.heappop(frontier)
            chosen.append(Candidate(parent, token, -negative))
            offer(node, len(chosen) - 1, level, -negative)
        return Speculation(chosen, length, self.longest_pattern)
