"""Token ids as the text a reader sees, byte-level tokens included.

Byte-level BPE (GPT-2, SmolLM2, Qwen) and SentencePiece's byte fallback split a character the vocabulary lacks
into tokens of one or a few UTF-8 bytes: "日" is three tokens, E6 97 A5, none of them a character alone, so each
decodes to "�". Shown in a sequence, the token that completes a character shows the character (given the bytes
pending before it), and a token whose bytes do not complete one shows them as ``⟨E6⟩``. A token's text therefore
depends on the bytes still pending before it: :meth:`TokenTexts.after` gives the texts at a later position.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from specviz.engine.trace import TopTokens

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

BYTE_FALLBACK = re.compile(r"<0x([0-9A-Fa-f]{2})>")  # SentencePiece's byte tokens
PENDING_TOKENS = 4  # a UTF-8 character has at most 4 bytes, and every token at least one


def byte_level_alphabet() -> dict[str, int]:
    """GPT-2's byte-level BPE alphabet, character -> byte (Radford et al. 2019, encoder.py's ``bytes_to_unicode``):
    the printable Latin-1 bytes stand for themselves, every other byte for the character 256 + its rank."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    others = [b for b in range(256) if b not in printable]
    return {**{chr(b): b for b in printable}, **{chr(256 + n): b for n, b in enumerate(others)}}


BYTE_LEVEL = byte_level_alphabet()


def incomplete_tail(data: bytes) -> bytes:
    """The bytes at the end of ``data`` that begin a UTF-8 character not yet complete (b"" if none)."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 != 0x80:  # an ASCII or a lead byte: its character's length
            need = 1 if byte < 0xC0 else 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return data[-back:] if need > back else b""
    return b""


def readable(data: bytes, start: int) -> str:
    """``data[start:]`` as text: each character it completes (bytes before ``start`` included) as itself, each byte
    that completes none as ``⟨XX⟩``."""
    pieces, i = [], 0
    while i < len(data):
        for n in range(1, 5):
            try:
                char = data[i : i + n].decode("utf-8")
            except UnicodeDecodeError:
                continue
            if i + n > start:
                pieces.append(char)
            i += n
            break
        else:
            if i >= start:
                pieces.append(f"⟨{data[i]:02X}⟩")
            i += 1
    return "".join(pieces)


class TokenTexts:
    """id -> display text after the bytes ``pending`` (the start of a character earlier tokens left incomplete);
    decoded once per run (the caches are shared with every :meth:`after`)."""

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        pending: bytes = b"",
        caches: tuple[dict[int, str], dict[int, bytes]] | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.pending = pending
        self.alone, self.bytes = caches or ({}, {})

    def text_alone(self, token_id: int) -> str:
        if token_id not in self.alone:
            # transformers types decode() as str | list[str]; one id list decodes to one str
            self.alone[token_id] = self.tokenizer.decode([token_id])  # type: ignore[assignment]
        return self.alone[token_id]

    def token_bytes(self, token_id: int) -> bytes:
        """The UTF-8 bytes a token stands for (its piece read through the byte-level alphabet or byte fallback)."""
        if token_id not in self.bytes:
            # typed str | list[str]: one id gives its one piece (None for an id the tokenizer lacks)
            piece: str | None = self.tokenizer.convert_ids_to_tokens(token_id)  # type: ignore[assignment]
            fallback = BYTE_FALLBACK.fullmatch(piece or "")
            if fallback:
                self.bytes[token_id] = bytes([int(fallback.group(1), 16)])
            elif piece and all(c in BYTE_LEVEL for c in piece):
                self.bytes[token_id] = bytes(BYTE_LEVEL[c] for c in piece)
            else:
                self.bytes[token_id] = self.text_alone(token_id).encode("utf-8")
        return self.bytes[token_id]

    def __call__(self, token_id: int) -> str:
        text = self.text_alone(token_id)
        if not self.pending and "\ufffd" not in text:
            return text
        return readable(self.pending + self.token_bytes(token_id), len(self.pending))

    def after(self, ids: list[int]) -> TokenTexts:
        """The texts at the position after ``ids`` (which follow this position)."""
        data = self.pending if len(ids) <= PENDING_TOKENS else b""
        for token_id in ids[-PENDING_TOKENS:]:
            whole = "\ufffd" not in self.text_alone(token_id)
            data = b"" if whole else incomplete_tail(data + self.token_bytes(token_id))
        return TokenTexts(self.tokenizer, data, (self.alone, self.bytes))

    def sequence(self, ids: list[int]) -> list[str]:
        """Each token of a sequence that starts at this position, as it reads there."""
        texts, here = [], self
        for token_id in ids:
            texts.append(here(token_id))
            here = here.after([token_id])
        return texts

    def top(self, probs: torch.Tensor, n: int) -> TopTokens:
        return self.of(torch.topk(probs, min(n, probs.shape[-1])).indices.tolist(), probs)

    def of(self, ids: Sequence[int], probs: torch.Tensor) -> TopTokens:
        """These tokens with their texts and probabilities under ``probs``."""
        return TopTokens(ids=list(ids), texts=[self(i) for i in ids], probs=[float(probs[i]) for i in ids])
