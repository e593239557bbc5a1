"""Byte-level tokens read as the characters they form (the embedded tokenizer splits "日" into three byte tokens)."""

from __future__ import annotations

import re

import pytest

from specviz.config import DecodeConfig
from specviz.engine import ModelPair, load_pair, speculative_decode
from specviz.engine.token_texts import BYTE_LEVEL, TokenTexts, incomplete_tail, readable


@pytest.fixture(scope="module")
def embedded_pair(embedded) -> ModelPair:
    return load_pair(DecodeConfig(device="cpu"))


@pytest.fixture(scope="module")
def tokenizer(embedded):
    return embedded.tokenizer


def test_the_byte_level_alphabet_covers_every_byte_once():
    assert sorted(BYTE_LEVEL.values()) == list(range(256)) and BYTE_LEVEL["Ġ"] == ord(" ")


def test_incomplete_characters_are_told_from_whole_ones():
    assert incomplete_tail("a日".encode()[:-1]) == "日".encode()[:2]
    assert incomplete_tail("a日".encode()) == b"" and incomplete_tail(b"") == b""
    assert readable("日".encode(), start=2) == "日"  # the byte that completes it shows the character
    assert readable(b"\xe6\x97", start=1) == "⟨97⟩"  # a byte that completes nothing shows itself


@pytest.mark.slow
def test_a_sequence_of_byte_tokens_reads_as_its_characters(tokenizer):
    text = "Grüße, € ok 日本"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    alone = [tokenizer.decode([i]) for i in ids]
    assert sum("\ufffd" in t for t in alone) >= 2  # the tokenizer does split a character here
    shown = TokenTexts(tokenizer).sequence(ids)
    assert not any("\ufffd" in t for t in shown)
    assert re.sub("⟨[0-9A-F]{2}⟩", "", "".join(shown)) == text  # each character shown once, by the token ending it
    assert "日" in shown and any(t.startswith(" ⟨E6⟩") for t in shown)
    # the same token after other bytes: the text depends on what is pending before it
    last_byte = ids[shown.index("日")]
    assert TokenTexts(tokenizer)(last_byte).startswith("⟨")


@pytest.mark.slow
def test_a_trace_of_a_prompt_with_split_characters_shows_no_replacement_character(embedded_pair):
    config = DecodeConfig(max_new_tokens=8, device="cpu")
    trace = speculative_decode(config, prompt="Écris « été » en japonais : 夏", pair=embedded_pair)
    shown = (
        trace.prompt_tokens
        + [t for r in trace.rounds for t in r.emitted_texts]
        + [p.text for r in trace.rounds for p in r.draft]
    )
    assert not any("\ufffd" in t for t in shown), shown


@pytest.mark.slow
def test_a_byte_token_deep_in_a_tree_reads_as_the_text_after_its_path(tokenizer):
    """#53: tree nodes took the round's texts, not the texts after their path, so the byte that completes "日" at
    depth 3 read "⟨A5⟩". A chain root -> E6 -> 97 -> A5 with a sibling at depth 3, every node the target's argmax
    (greedy): the nodes, the checks and the bonus read as the text after their own path."""
    import torch

    from specviz.drafters.base import DraftTree, TreeNode
    from specviz.engine.records import describe_tree
    from specviz.engine.verification import decide_tree
    from specviz.registry.rules import rule_for

    byte_token = {b: tokenizer.convert_tokens_to_ids(c) for c, b in BYTE_LEVEL.items()}
    e6, x97, a5 = (byte_token[b] for b in "日".encode())
    sibling = tokenizer.convert_tokens_to_ids("a")
    vocab = len(tokenizer)
    tokens = [tokenizer.eos_token_id, e6, x97, sibling, a5]  # node 3 (a) and node 4 (A5) are siblings under 97
    parents = [-1, 0, 1, 2, 2]
    nodes = [TreeNode(i, parents[i], i if i < 3 else 3, t, 1.0, int(i == 4)) for i, t in enumerate(tokens)]
    for node in nodes[1:]:
        nodes[node.parent].children.append(node.index)

    def onehot(token: int) -> torch.Tensor:
        dist = torch.full((vocab,), 1e-9)
        dist[token] = 1.0
        return dist / dist.sum()

    argmax_after = {0: e6, 1: x97, 2: a5, 3: e6, 4: e6}  # the target wants A5 after 97: the sibling "a" is rejected
    target_probs = [onehot(argmax_after[i]) for i in range(len(nodes))]
    tree = DraftTree(nodes, [[1], [2], [3, 4]], {i: onehot(argmax_after[i]) for i in range(3)})
    config = DecodeConfig(rule="greedy", top_n=3)
    rule = rule_for(config)
    decision = decide_tree(tree, target_probs, rule, torch.Generator())
    outcome = describe_tree(tree, target_probs, decision, rule, TokenTexts(tokenizer), config.top_n)
    assert outcome.accepted_path == [1, 2, 4]
    record = {n.index: n for n in outcome.tree.nodes}
    assert [record[i].text for i in (1, 2, 4)] == ["⟨E6⟩", "⟨97⟩", "日"]  # the byte completing 日 shows 日
    assert record[2].target_top.texts[0] == "日"  # node 2's candidates read after E6 97
    assert [p.text for p in outcome.positions] == ["⟨E6⟩", "⟨97⟩", "a", "日"]
