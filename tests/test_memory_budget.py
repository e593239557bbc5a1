"""The server's memory budget: the least recently used pairs nobody uses make room for a new one; a pair a running
computation holds is never dropped; what cannot fit even then is refused with a message."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from specviz.config import DecodeConfig
from specviz.models.loading import bytes_to_load, load_model
from specviz.runtime.machine import give_back_freed_heap, memory_budget_bytes, resident_bytes
from specviz.serving.built_once import BuiltOnce
from specviz.serving.pairs import LOADED_PAIRS, loading_config, pair_for
from specviz.settings import ModelLoadError
from tests.tiny import make_tiny_model


class Value:
    """A built value (weak-referenceable, as a model pair is)."""

    def __init__(self, key: str) -> None:
        self.key = key


def test_the_oldest_values_nobody_holds_are_dropped_until_the_new_one_fits():
    cache = BuiltOnce(Value, kept=10)
    a, b, c = (cache.get(k) for k in "abc")
    released = []
    del a, c  # b is in use: a running computation holds it
    assert cache.evict_until(lambda: len(cache.values()) <= 1, lambda: released.append(1))
    assert [v.key for v in cache.values()] == ["b"] and len(released) == 3  # a, c dropped; b tried, kept
    assert not cache.evict_until(lambda: not cache.values(), lambda: None)  # b cannot go while held
    assert [v.key for v in cache.values()] == ["b"] and b.key == "b"


def test_a_pair_is_kept_under_what_loading_reads_alone():
    """Configs that differ only in how they decode share one pair; the models, the drafter, the device and the
    precisions (the draft's, said or left to the target's, only where a draft loads) tell pairs apart."""
    base = DecodeConfig(target="t", draft="d", drafter="model", device="cpu", dtype="bfloat16")
    assert loading_config(base) == loading_config(base.replace(gamma=7, temperature=0.3, seed=9, rule="greedy"))
    assert loading_config(base) == loading_config(base.replace(draft_dtype="bfloat16"))  # the target's, said
    assert loading_config(base) != loading_config(base.replace(draft_dtype="int8"))
    assert loading_config(base) != loading_config(base.replace(dtype="float32"))
    assert loading_config(base) != loading_config(base.replace(draft="other"))
    ngram = base.replace(drafter="ngram")  # loads no draft: its draft and the draft's precision do not count
    assert loading_config(ngram) == loading_config(ngram.replace(draft="other", draft_dtype="int8"))
    assert loading_config(ngram) != loading_config(base)
    assert loading_config(loading_config(base)) == loading_config(base)


def test_a_pair_that_cannot_fit_is_refused_and_a_pair_in_use_stays(tiny_dirs, tmp_path, monkeypatch):
    config = DecodeConfig(target=tiny_dirs["target"], draft=tiny_dirs["draft"], drafter="model", device="cpu")
    in_use = pair_for(config)  # a running computation's pair
    new = make_tiny_model(tmp_path / "new", seed=5, layers=2, hidden=32)
    stored = bytes_to_load(new, "cpu", "float32")
    assert stored[0] == stored[1] > 0 and bytes_to_load(tiny_dirs["target"], "cpu", "float32") == (0, 0)
    peak, kept = bytes_to_load(new, "cpu", "bfloat16")  # the file mapped while its half-size copy is made
    assert kept == stored[0] // 2 and peak == stored[0] + kept
    monkeypatch.setenv("SPECVIZ_MEMORY_SHARE", "0")  # a budget nothing fits in
    assert memory_budget_bytes() == 0
    with pytest.raises(ModelLoadError, match="Not enough memory for this pair now"):
        pair_for(config.replace(target=new, drafter="ngram"))
    assert in_use in LOADED_PAIRS.values()  # held, so never dropped under its computation
    assert load_model(tiny_dirs["target"], "cpu") is in_use.target  # and no second copy is loaded
    monkeypatch.setenv("SPECVIZ_MEMORY_SHARE", "0.8")
    assert pair_for(config.replace(target=new, drafter="ngram")).target.spec == new  # room again: it loads


def test_freed_heap_pages_go_back_to_the_system_so_the_budget_sees_them_gone():
    """#45: after the Precision page's pairs were dropped, 9 GB stayed resident and the next load was refused. Freed
    small allocations stay in the C heap (here: 200 MB of 64 kB blocks, every tenth kept, so the heap cannot simply
    shrink from its top); :func:`give_back_freed_heap` returns their pages, and the resident memory the budget reads
    falls."""
    import ctypes

    if not hasattr(ctypes.CDLL(None), "malloc_trim"):
        pytest.skip("this C library has no malloc_trim")
    blocks = [bytearray(64 * 1024) for _ in range(3200)]
    kept = blocks[::10]
    del blocks
    before = resident_bytes()
    give_back_freed_heap()
    assert before - resident_bytes() > 100 * 2**20 and kept


def test_threads_asking_for_one_pair_at_once_build_it_once():
    """#53: a class's first minute: eight sessions ask for one pair together; one build, one copy held."""
    import time

    builds: list[str] = []

    def build(key: str) -> Value:
        builds.append(key)
        time.sleep(0.05)
        return Value(key)

    cache = BuiltOnce(build, kept=2)
    got: list[Value] = []
    threads = [threading.Thread(target=lambda: got.append(cache.get("pair"))) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert builds == ["pair"] and len({id(v) for v in got}) == 1 and len(cache.values()) == 1


class NewcomerAtRelease:
    """The holder's lock, instrumented: the first time it is released after the build has returned, a newcomer asks
    for the key (in its own thread, to its end) before the builder goes on: the moment a session arriving just as
    the build ends meets."""

    def __init__(self, cache: BuiltOnce, built: threading.Event) -> None:
        self.inner, self.cache, self.built, self.handed = threading.Lock(), cache, built, False

    def __enter__(self) -> None:
        self.inner.acquire()

    def __exit__(self, *exc: object) -> None:
        self.inner.release()
        if self.built.is_set() and not self.handed:
            self.handed = True
            newcomer = threading.Thread(target=self.cache.get, args=("pair",))
            newcomer.start()
            newcomer.join()


def test_a_session_arriving_as_the_build_ends_gets_the_built_pair():
    """#53: ``get`` let go of its lock between the build's end and storing the value, so a session arriving in that
    window found the pair neither built nor building and loaded a second copy (a class's first minute, on a 24 GB
    machine). The newcomer is placed exactly there."""
    builds: list[str] = []
    built = threading.Event()

    def build(key: str) -> Value:
        builds.append(key)
        built.set()
        return Value(key)

    cache = BuiltOnce(build, kept=2)
    cache._lock = NewcomerAtRelease(cache, built)  # type: ignore[assignment]
    cache.get("pair")
    assert builds == ["pair"], f"{len(builds)} builds of one pair"


def test_an_int8_embedding_holds_only_the_rows_a_text_reads(tmp_path, monkeypatch):
    """The int8 input embedding's rows live in a file of the cache, mapped: making one keeps none of its table in the
    process's memory, a lookup makes only the rows it reads resident, and they are the quantised rows."""
    import gc

    import torch
    from torch import nn

    from specviz.runtime.cpu.int8 import Int8Embedding, quantise_rows

    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    embedding = nn.Embedding(65536, 1024)  # its int8 table: 64 MiB
    give_back_freed_heap()
    before = resident_bytes()
    table = Int8Embedding(embedding)
    gc.collect()
    give_back_freed_heap()
    assert resident_bytes() - before < 16 * 2**20  # held in memory, the table alone would add 64 MiB
    (stored,) = (tmp_path / "tables").iterdir()
    assert stored.stat().st_size == 65536 * 1024 and str(stored) in open("/proc/self/maps", encoding="utf-8").read()
    ids = torch.tensor([3, 40_000, 65_535])
    looked_up = table(ids)
    assert resident_bytes() - before < 16 * 2**20
    values, scales = quantise_rows(embedding.weight.detach().float())
    assert torch.equal(looked_up, values[ids].float() * scales[ids])
    assert torch.equal(Int8Embedding(embedding).values, table.values)  # a second load maps the same file
    assert len(list((tmp_path / "tables").iterdir())) == 1


def peak_resident_bytes_of(build: Callable[[], object]) -> int:
    """How far this process's resident memory rose above where it stood while ``build`` ran (its peak, reset first:
    ``/proc/self/clear_refs``, Linux's "5", then ``VmHWM``)."""
    import gc

    gc.collect()
    give_back_freed_heap()
    Path("/proc/self/clear_refs").write_text("5")
    before = resident_bytes()
    build()
    status = Path("/proc/self/status").read_text()
    peak_kib = int(next(line for line in status.splitlines() if line.startswith("VmHWM:")).split()[1])
    return peak_kib * 1024 - before


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="the peak is reset through Linux's /proc")
def test_an_int8_head_and_embedding_quantised_as_read_hold_one_block_of_their_float32_weight(tmp_path, monkeypatch):
    """House v5: quantising a 151,936-row output head or input embedding at once held the float32 weight's file
    pages and two float32 temporaries its size (the Qwen pair's race peaked at 6.0 GB for 2.58 GB kept). Quantised
    a block of rows at a time as the file is read, a 256 MiB float32 weight (mapped from its file, as transformers
    loads a checkpoint) peaks under its int8 copy twice (its values, and the packed copy oneDNN makes of them) plus
    128 MiB: one block's file pages and float32 rows (8 MiB each), the five or so float32 temporaries quantising a
    block takes (8 MiB each), and the allocator's slack (measured on a fresh 2-core AVX2 run: 65 MiB above the two
    int8 copies). At once it took over three times the float32 weight: 768 MiB and more."""
    import torch
    from torch import nn

    from specviz.runtime.cpu.int8 import Int8Embedding, Int8Linear
    from specviz.runtime.cpu.mapped_pages import file_backed

    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    rows, columns = 65536, 1024
    weight = nn.Parameter(file_backed(torch.randn(rows, columns), tmp_path / "checkpoint"), requires_grad=False)
    head, embedding = nn.Linear(columns, rows, bias=False, device="meta"), nn.Embedding(rows, columns, device="meta")
    head.weight = embedding.weight = weight
    int8_bytes = rows * columns
    block_and_slack = 128 * 2**20
    assert peak_resident_bytes_of(lambda: Int8Linear(head)) < 2 * int8_bytes + block_and_slack
    assert peak_resident_bytes_of(lambda: Int8Embedding(embedding)) < 2 * int8_bytes + block_and_slack
