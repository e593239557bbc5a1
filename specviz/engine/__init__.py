"""The speculative decoding engine: the round loop, verification, what each round records, the trace.

``loop``: the rounds; ``baseline``: the target alone; ``verification``: what the one target pass and the
rule make of a proposal; ``records``: what each round records; ``trace``: the typed records pages read.
The model pair a run uses (:mod:`specviz.models.pair`) is re-exported here for the engine's callers.
"""

from specviz.engine.baseline import autoregressive_decode
from specviz.engine.loop import speculative_decode
from specviz.models.pair import ModelPair, eos_ids, load_pair, prompt_ids_for, uses_draft_model

__all__ = [
    "ModelPair",
    "autoregressive_decode",
    "eos_ids",
    "load_pair",
    "prompt_ids_for",
    "speculative_decode",
    "uses_draft_model",
]
