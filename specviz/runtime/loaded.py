"""A loaded model: the weights, the tokenizer and what was measured of it, shared read-only by every session, and
the results computed once from it, held only while it lives."""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from specviz.runtime.vocab_ranking import VocabRanking
from specviz.settings import ConfigError


@dataclass(eq=False)
class LoadedModel:
    """A model with its tokenizer, shared read-only by every session of the process."""

    spec: str
    name: str
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    device: torch.device
    vocab_ranking: VocabRanking | None = None  # draft models: token ids by frequency (FR-Spec), if shipped
    precision: str = "float32"  # as loaded: float32, bfloat16, float16, or int8 (a draft's: int8 matrices)
    passes: str = "dynamic"  # how its passes run: "dynamic" (a growing cache, every CPU's) or over a static cache,
    # "static" or "graphed" (captured as CUDA graphs): specviz.runtime.static_passes.passes_for
    lock: threading.Lock = field(default_factory=threading.Lock)
    # the machine profile (specviz.models.profile.PassProfile) of each kernel path measured at load, by path name
    profiles: dict[str, Any] = field(default_factory=dict)

    def draft_head_size(self, requested: int | None) -> int:
        """The draft head's size K for a run asking for ``requested`` (FR-Spec, Zhao et al. 2025: the K most
        frequent tokens; 0: the whole vocabulary; None: the size the draft was shipped with, the full vocabulary
        without a frequency ranking)."""
        ranking = self.vocab_ranking
        if requested is None:
            return ranking.recommended if ranking else 0
        if requested and ranking is None:
            raise ConfigError(
                f"A trimmed draft vocabulary (draft_vocab={requested}) needs a draft that ships a token frequency "
                f"ranking, as the embedded draft does; {self.name} has none (use 0: all tokens)"
            )
        return 0 if ranking is None or requested >= len(ranking.order) else requested

    @property
    def num_layers(self) -> int:
        return int(self.model.config.num_hidden_layers)

    @property
    def context_length(self) -> int:
        return int(getattr(self.model.config, "max_position_embeddings", 2048) or 2048)


R = TypeVar("R")


def memoised_while_alive(function: Callable[..., R]) -> Callable[..., R]:
    """Memoise ``function(owner, *args)`` per live ``owner`` (a weak key) and hashable ``args``.

    Unlike ``functools.lru_cache``, which holds its keys, this drops an owner's results with the owner, so a
    model the process's model cache lets go is not kept alive by what was derived from it. The results must
    not refer back to their owner (tensors that share its weights' storage are fine). Two threads may both
    compute a missing result; both get an equal one.
    """
    results: weakref.WeakKeyDictionary[object, dict[tuple[Hashable, ...], R]] = weakref.WeakKeyDictionary()

    @functools.wraps(function)
    def memoised(owner: object, *args: Hashable) -> R:
        owned = results.setdefault(owner, {})
        if args not in owned:
            owned[args] = function(owner, *args)
        return owned[args]

    return memoised
