"""Passes over a static KV cache, which a GPU captures once as CUDA graphs and replays.

On a GPU a small model's step is launch-bound: the embedded 135M target's one-token step took 17.3 ms on an H200
(issue #64), about half a millisecond of Python and kernel launches for each of its 30 layers, against some 0.1 ms of
weights to read. gpt-fast (Meta, 2023) removes that time: keys and values live in buffers of one fixed shape, each
new token's are written at its slot, and attention reads every slot through a mask, so a pass over T tokens has the
same shapes, and the same memory, at every length of the sequence. It is then captured once as a CUDA graph
(``torch.cuda.CUDAGraph``) and replayed: one launch for the whole pass, the Python not run again.

Here a loaded model's :class:`StaticPasses` holds one such buffer (its capacity grown in steps of
:data:`CAPACITY_STEP` slots as sequences lengthen) and the graphs captured over it, one per pass shape (T new tokens,
the last ``n_last`` wanted, the head); a :class:`StaticCache` is one sequence's place in it (the slots it holds),
which takes the buffer over when another sequence held it last (its contents kept aside, :meth:`StaticPasses.claim`).
A pass computes the direct Llama math (:func:`~specviz.runtime.llama_step.llama_hidden`) over the buffer, the new
tokens at slots ``cached .. cached + T - 1`` attending where their causal or tree mask allows, and gives the same
numbers as the same math over a growing cache up to the order a masked softmax adds its terms in
(tests/test_static_passes.py: the same tokens, chain and tree, in every float precision).

Where CUDA is absent, or graphs are turned off (``SPECVIZ_CUDA_GRAPHS=0``), or a capture fails, the same pass runs
eagerly: the fallback computes what the graph would. The CPU keeps its own passes (:mod:`specviz.runtime.reference`);
these run where a model is loaded with ``passes`` "graphed" (a plain Llama in a float precision on CUDA).
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import PreTrainedModel

from specviz.runtime.llama_step import LlamaWeights, llama_hidden, llama_weights
from specviz.runtime.loaded import LoadedModel, memoised_while_alive
from specviz.runtime.tree_layout import TreeLayout

log = logging.getLogger(__name__)

CAPACITY_STEP = 256  # slots a model's buffer grows by: a graph reads every slot, so it holds what sequences need
GRAPHED_WIDTH_MAX = 64  # passes over more new tokens (a prompt's) run eagerly: each is run once, a capture would cost
GRAPHS_VAR = "SPECVIZ_CUDA_GRAPHS"  # "0": run the static passes eagerly on a GPU too
DYNAMIC, STATIC, GRAPHED = "dynamic", "static", "graphed"  # a loaded model's passes (LoadedModel.passes)

Head = Callable[[torch.Tensor], torch.Tensor]  # final hidden states (n, H) -> logits (n, V or K)


def passes_for(device: torch.device, model: PreTrainedModel) -> str:
    """Which passes ``model``, loaded on ``device``, takes: graphed static passes for a plain Llama in a float
    precision on CUDA (eager where ``SPECVIZ_CUDA_GRAPHS=0``), else the dynamic passes every CPU takes."""
    if device.type != "cuda" or not model.dtype.is_floating_point or llama_weights(model) is None:
        return DYNAMIC
    return STATIC if os.environ.get(GRAPHS_VAR) == "0" else GRAPHED


@dataclass
class StaticCache:
    """One sequence's keys and values in its model's :class:`StaticPasses`: the first ``length`` slots while it holds
    the buffer, else ``kept`` (layers, 2, kv heads, length, d) set aside. Crop and keep follow ``DynamicCache``'s
    use in :class:`~specviz.runtime.protocol.KVCachedSequence`."""

    passes: StaticPasses
    length: int = 0
    kept: torch.Tensor | None = None

    def get_seq_length(self) -> int:
        return self.length

    def crop(self, max_length: int) -> None:
        """Keep the first ``max_length`` slots (negative: drop that many from the end), as ``DynamicCache.crop``."""
        self.length = max(0, self.length + max_length if max_length < 0 else min(max_length, self.length))

    def keep(self, indices: list[int]) -> None:
        """Keep only the slots at ``indices`` (in order), moved to the front: a tree's committed path."""
        with self.passes.lock, torch.inference_mode():  # the buffer is made, and read, in inference mode
            self.passes.claim(self)
            buffer = self.passes.buffer
            index = torch.tensor(indices, dtype=torch.long, device=buffer.device)
            buffer[..., : len(indices), :] = buffer.index_select(3, index)
            self.length = len(indices)


@dataclass
class PassInputs:
    """The static input tensors of one pass shape, which a captured graph reads: the new tokens' ids (T,), position
    ids (T,), slots (T,) and where each may attend, (T, capacity) bool."""

    ids: torch.Tensor
    positions: torch.Tensor
    slots: torch.Tensor
    allowed: torch.Tensor

    @classmethod
    def empty(cls, width: int, capacity: int, device: torch.device) -> PassInputs:
        return cls(
            torch.zeros(width, dtype=torch.long, device=device),
            torch.zeros(width, dtype=torch.long, device=device),
            torch.arange(width, dtype=torch.long, device=device),
            torch.zeros(width, capacity, dtype=torch.bool, device=device),
        )

    def fill(self, new_ids: list[int], cached: int, layout: TreeLayout | None) -> None:
        """The pass's values, in place: tokens at slots ``cached ..``, attending causally or where ``layout`` says."""
        width, device = len(new_ids), self.ids.device
        self.ids.copy_(torch.tensor(new_ids), non_blocking=True)
        self.slots.copy_(torch.arange(cached, cached + width, device=device))
        if layout is not None:
            self.positions.copy_(torch.tensor(layout.positions), non_blocking=True)
            mask = layout.allowed.to(device, non_blocking=True)
        else:  # made where it is read: a step's mask crosses no bus
            self.positions.copy_(self.slots)
            mask = torch.ones(width, cached + width, dtype=torch.bool, device=device).tril(cached)
        self.allowed.zero_()
        self.allowed[:, : cached + width].copy_(mask)


class SlotWriter:
    """The cache a pass's layers write to: each layer's new keys and values (1, kv heads, T, d) go to its slots in the
    buffer, and attention reads every slot (:func:`~specviz.runtime.llama_step.llama_layer` calls ``update``)."""

    def __init__(self, buffer: torch.Tensor, slots: torch.Tensor) -> None:
        self.buffer, self.slots = buffer, slots

    def update(self, keys: torch.Tensor, values: torch.Tensor, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        self.buffer[layer, 0].index_copy_(1, self.slots, keys[0])
        self.buffer[layer, 1].index_copy_(1, self.slots, values[0])
        return self.buffer[layer, 0][None], self.buffer[layer, 1][None]  # (1, kv heads, capacity, d) each


@dataclass(frozen=True)
class PassShape:
    """What a captured graph is specific to: T new tokens, the last ``n_last`` of them out, through which head (its
    name), hidden states returned or not, over a buffer of ``capacity`` slots."""

    width: int
    n_last: int
    head: str
    states: bool
    capacity: int


@dataclass
class CapturedPass:
    """One pass shape's static inputs and, once captured, its graph and output tensors."""

    inputs: PassInputs
    graph: torch.cuda.CUDAGraph | None = None
    outputs: tuple[torch.Tensor, ...] = ()


@dataclass(eq=False)
class StaticPasses:
    """A loaded model's static KV buffer (layers, 2, kv heads, capacity, d) and its passes over it, each pass shape
    captured once as a CUDA graph where ``graphed`` (:data:`GRAPHED`) and CUDA is at hand; the sequence holding the
    buffer now is ``holder`` (weakly: a finished sequence's slots are not set aside). Used under the model's lock, as
    every pass is. It holds what it reads of the model, never the :class:`LoadedModel` (a memoised result must not
    keep its owner alive: a model the process lets go frees its buffer and graphs with it)."""

    weights: LlamaWeights
    head: Head  # the model's output head (its module: weights only read)
    dtype: torch.dtype
    device: torch.device
    lock: threading.Lock  # the model's: every pass holds it
    graphed: bool
    pool: Any = (
        None  # torch.cuda.graph_pool_handle(): one CUDA memory pool for the model's graphs (replayed one at a time)
    )
    capacity: int = 0
    buffer: torch.Tensor = field(default_factory=lambda: torch.empty(0))
    holder: weakref.ref[StaticCache] | None = None
    captured: dict[PassShape, CapturedPass] = field(default_factory=dict)
    stream: Any = None  # the one side stream every capture of this model runs on (made at its first capture)
    failed: int = 0  # pass shapes whose capture failed on a GPU since the process began (each runs eagerly)
    growths: int = 0  # times the buffer was made larger (each drops every graph over the old one)

    @property
    def graphs(self) -> int:
        """The pass shapes captured as CUDA graphs over the present buffer."""
        return sum(entry.graph is not None for entry in self.captured.values())

    def claim(self, cache: StaticCache) -> None:
        """Give the buffer to ``cache``: the holder's slots set aside in its own ``kept``, the newcomer's put back."""
        holder = self.holder() if self.holder is not None else None
        if holder is cache:
            return
        if holder is not None:
            holder.kept = self.buffer[..., : holder.length, :].clone()
        if cache.kept is not None:
            self.reserve(cache.kept.shape[3])
            self.buffer[..., : cache.kept.shape[3], :] = cache.kept
            cache.kept = None
        self.holder = weakref.ref(cache)

    def reserve(self, slots: int) -> None:
        """A buffer of at least ``slots`` slots (the capacity grown in steps; the holder's slots carried over, the
        graphs over the old buffer dropped)."""
        if slots <= self.capacity:
            return
        capacity = -(-slots // CAPACITY_STEP) * CAPACITY_STEP
        layers, heads, dim = len(self.weights.layers), self.weights.kv_heads, self.weights.head_dim
        grown = torch.zeros(layers, 2, heads, capacity, dim, dtype=self.dtype, device=self.device)
        holder = self.holder() if self.holder is not None else None
        if holder is not None and self.capacity:
            grown[..., : holder.length, :] = self.buffer[..., : holder.length, :]
        self.buffer, self.capacity, self.captured = grown, capacity, {}
        self.growths += 1

    def run(
        self,
        cache: StaticCache,
        new_ids: list[int],
        cached: int,
        n_last: int,
        layout: TreeLayout | None,
        states: bool = False,
        head: tuple[str, Head] | None = None,
    ) -> tuple[torch.Tensor, ...]:
        """Feed ``new_ids`` to ``cache`` (which holds ``cached`` slots) and return the logits (n_last, V or K) of the
        last ``n_last`` of them through ``head`` (its name and function; None: the model's output head), with the
        final hidden states of all T, (T, H), where ``states``. Replays the shape's graph where captured (capturing
        it the first time), else runs eagerly. Holds the model's lock, in inference mode, as every pass does."""
        head = head or ("whole", self.head)
        with self.lock, torch.inference_mode():
            self.claim(cache)
            self.reserve(cached + len(new_ids))
            shape = PassShape(len(new_ids), n_last, head[0], states, self.capacity)
            entry = self.captured.get(shape) or CapturedPass(
                PassInputs.empty(shape.width, self.capacity, self.buffer.device)
            )
            entry.inputs.fill(new_ids, cached, layout)
            cache.length = cached + len(new_ids)
            compute = lambda: self.compute(entry.inputs, shape, head[1])  # noqa: E731  (what a graph captures)
            if not self.graphed or not cached or shape.width > GRAPHED_WIDTH_MAX:  # a first pass holds a prompt: once
                return compute()
            if shape not in self.captured:
                self.captured[shape] = entry
                if self.pool is None and torch.cuda.is_available():
                    self.pool, self.stream = torch.cuda.graph_pool_handle(), torch.cuda.Stream(self.device)
                entry.graph, entry.outputs = capture(compute, self.device, self.pool, self.stream)
                self.failed += entry.graph is None and torch.cuda.is_available()
            if entry.graph is None:  # not captured (no GPU, or the capture failed): eager, the same numbers
                return compute()
            entry.graph.replay()
            return tuple(out.clone() for out in entry.outputs)

    def compute(self, inputs: PassInputs, shape: PassShape, head: Head) -> tuple[torch.Tensor, ...]:
        """The pass itself: the direct Llama body over the buffer, then ``head`` on the last ``n_last`` states."""
        writer = SlotWriter(self.buffer, inputs.slots)
        wanted = shape.width if shape.states else shape.n_last
        hidden = llama_hidden(self.weights, inputs.ids, inputs.positions, inputs.allowed, writer, wanted)  # type: ignore[arg-type]
        logits = head(hidden[-shape.n_last :])
        return (logits, hidden) if shape.states else (logits,)


CAPTURING = threading.Lock()  # one CUDA graph capture at a time in the process (torch.cuda.graph's rule)


def capture(
    compute: Callable[[], tuple[torch.Tensor, ...]], device: torch.device, pool: Any, side: Any
) -> tuple[torch.cuda.CUDAGraph | None, tuple]:
    """``compute`` captured as a CUDA graph on ``device`` (its memory from ``pool``) after a warm-up run on the
    model's side stream ``side`` (the capture itself runs nothing: the warm-up wrote this pass's keys and values, the
    same the replay writes); (None, ()) off a GPU, and where the capture fails, which is logged: the pass then runs
    eagerly.

    Captures are one at a time (two models' locks do not exclude each other) and only this thread's CUDA calls are
    held to the capture's rules (``thread_local``: another session's allocation does not break it); the side stream
    is entered outside the capture, so a capture that fails still gives the thread its own stream back."""
    if not torch.cuda.is_available():
        return None, ()
    try:
        with CAPTURING, torch.cuda.device(device):
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                compute()
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool=pool, stream=side, capture_error_mode="thread_local"):
                    outputs = compute()
            torch.cuda.current_stream().wait_stream(side)
        return graph, outputs
    except RuntimeError as exc:  # an operation a graph cannot hold, or memory: the pass stays eager
        log.warning("A CUDA graph capture failed, the pass runs eagerly: %s", exc)
        return None, ()


@memoised_while_alive
def static_passes(loaded: LoadedModel) -> StaticPasses:
    """The loaded model's static passes (made once per live model, under its lock: one buffer per model; its weights
    only read)."""
    weights = llama_weights(loaded.model)
    assert weights is not None, "static passes are made for plain Llama models (passes_for)"
    head = loaded.model.get_output_embeddings()
    return StaticPasses(weights, head, loaded.model.dtype, loaded.device, loaded.lock, loaded.passes == GRAPHED)
