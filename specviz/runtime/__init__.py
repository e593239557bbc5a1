"""The runtime: what runs a model's passes, apart from the lesson.

The engine, the drafters and the machine profile reach it through the forward protocol
(:mod:`specviz.runtime.protocol`: one signature for a step, a pass over k tokens and a tree's pass, with its shapes),
which this package's top exports with the reference forwards that follow it (:mod:`specviz.runtime.reference`: torch,
on any device). Behind them: the plain Llama math (:mod:`specviz.runtime.llama_step`), the drafts' own forwards, and
the CPU integer runtime (:mod:`specviz.runtime.cpu`: int8 and int4 products, Q4_K blocks, attention one row at a
time, the C kernels and their loading).
"""

from specviz.runtime.loaded import LoadedModel
from specviz.runtime.protocol import ForwardFn, KVCachedSequence, StatesForwardFn, TreeLayout, reserve_slots
from specviz.runtime.reference import full_forward, states_forward

__all__ = [
    "ForwardFn",
    "KVCachedSequence",
    "LoadedModel",
    "StatesForwardFn",
    "TreeLayout",
    "full_forward",
    "reserve_slots",
    "states_forward",
]
