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


def test_a_trace_of_a_prompt_with_split_characters_shows_no_replacement_character(embedded_pair):
    config = DecodeConfig(max_new_tokens=8, device="cpu")
    trace = speculative_decode(config, prompt="Écris « été » en japonais : 夏", pair=embedded_pair)
    shown = (
        trace.prompt_tokens
        + [t for r in trace.rounds for t in r.emitted_texts]
        + [p.text for r in trace.rounds for p in r.draft]
    )
    assert not any("\ufffd" in t for t in shown), shown
