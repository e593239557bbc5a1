"""The machine profile: what a model's passes cost on THIS machine, measured once and cached.

Whether speculative decoding pays is decided by two measured numbers (Leviathan et al. 2023, Sec. 3-4): the
draft's cost per drafted token over the target's one-token step (c), and the target's pass over k + 1 tokens in
one-token steps, v(k) = T(k + 1) / T(1). Where a step streams every weight from memory and the arithmetic is
spare, T is flat in k and v(k) ~ 1 (Leviathan et al. 2023, Sec. 3.4's assumption); where the kernel is
compute-bound or takes a slow path,
v grows with k and a large block loses. Which holds depends on the CPU (AMX tiles, AVX-512 with bfloat16 dot
products, AVX2 only), the precision and the matrix kernel, so the app measures it instead of guessing: for each
(model, forward, precision, kernel path and the C kernels' build, device, CPU, torch version) the cached pass over
1..9 new tokens after a realistic cached context, the median of alternating rounds (:mod:`specviz.models.pass_timing`
times them). Only a profile measured on a quiet machine is the machine's (:attr:`PassProfile.quiet`: the OS saw no
other work, the rounds agree, the timing thread had its core): its file in ``$SPECVIZ_CACHE/machine`` makes every
later load, in any process, free, and nothing measured later replaces it. One measured while other work held the
cores is never kept on disk: the process uses it to choose its kernels (the least loaded of its attempts: load only
ever slows a pass), the pages claim nothing from it and say what the load was (:func:`load_words`), and the next
process that asks measures again.

Pure torch; no streamlit.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from specviz.cache import cache_root, write_json_atomically
from specviz.limits import Progress
from specviz.models.pass_timing import CONTEXT_TOKENS, profile_context, time_passes
from specviz.runtime.cpu.compiled import library_path
from specviz.runtime.cpu.int4 import Int4Linear
from specviz.runtime.cpu.int8 import Int8Linear
from specviz.runtime.cpu.kernel_paths import (
    DEFAULT,
    KERNEL_PATHS,
    QUANTISED,
    PackedLinear,
    can_pack,
    kernels_of,
    use_kernels,
)
from specviz.runtime.loaded import LoadedModel
from specviz.runtime.machine import cpu_name, machine_key
from specviz.runtime.protocol import ForwardFn
from specviz.runtime.reference import full_forward

FORMAT = 5  # bumped when what a profile holds changes, so old files are measured again (3: the CPU share; 4: the
# other processes' cores, a robust spread, and only quiet profiles kept; 5: a GPU's passes timed to their end on it)
NOISY = 1.5  # the median pass size's slowest round this much longer than its fastest: the machine was busy
LOADED = 0.8  # a timing thread with less of a core than this waited for other work: the machine was busy
OTHER_WORK = 0.3  # other processes keeping more cores than this busy (an idle browser keeps a few hundredths): busy
ATTEMPTS = 2  # measurements tried before a busy profile is used (for this process only, never cached)
MEASURE_AGAIN_S = 300.0  # a busy profile this old is measured again when asked for (the quieter attempt kept)
FLAT = 1.25  # v(k) up to this counts as "flat": a pass over k + 1 tokens costs about one step


@dataclass(frozen=True)
class PassProfile:
    """One model's measured passes on this machine: ``pass_ms[n - 1]`` is the median ms of a cached forward over n
    new tokens (producing n positions' logits) after ``context`` cached tokens."""

    model: str  # display name
    forward: str  # which forward was timed ("full" for the model's own; a draft's direct forward otherwise)
    dtype: str
    kernels: str
    device: str
    cpu: str
    torch: str
    context: int
    pass_ms: tuple[float, ...]
    weight_bytes: int  # the bytes of every weight a step reads (embedding rows aside)
    spread: float = 1.0  # the median pass size's slowest-over-fastest round (NOISY and above: measured busy)
    cpu_share: float = 1.0  # the timing thread's share of a core (under LOADED: other work held the cores)
    other_cores: float | None = None  # cores other processes kept busy meanwhile (OTHER_WORK and above: busy)

    @property
    def quiet(self) -> bool:
        """Whether it was measured on a quiet machine: its rounds agree (spread < ``NOISY``) and, on a CPU, the timing
        thread had a core (CPU share >= ``LOADED``: :func:`~specviz.models.pass_timing.cpu_share`, so a load that
        stays constant through every round counts as load too) and other processes kept under ``OTHER_WORK`` cores
        busy (:func:`~specviz.models.pass_timing.other_cores`, as the OS counts them)."""
        return not profile_load(self)

    @property
    def step_ms(self) -> float:
        """One-token step, T(1)."""
        return self.pass_ms[0]

    def pass_cost_ms(self, tokens: int) -> float:
        """T(n): measured for n = 1..9, past that extended along the last measured slope."""
        last = len(self.pass_ms)
        if tokens <= last:
            return self.pass_ms[max(1, tokens) - 1]
        return self.pass_ms[-1] + (tokens - last) * max(0.0, self.pass_ms[-1] - self.pass_ms[-2])

    def verify_cost(self, k: int) -> float:
        """v(k) = T(k + 1) / T(1): the pass that verifies k drafted tokens, in one-token steps."""
        return self.pass_cost_ms(k + 1) / self.step_ms

    @property
    def verify_costs(self) -> dict[int, float]:
        """v(k) for every measured block size k = 1..8."""
        return {k: self.verify_cost(k) for k in range(1, len(self.pass_ms))}

    @property
    def bandwidth_gbs(self) -> float:
        """The memory bandwidth a one-token step achieves: weight bytes / T(1), in GB/s."""
        return self.weight_bytes / self.step_ms / 1e6

    def flat_until(self, tolerance: float = FLAT) -> int:
        """The largest block size k such that every pass up to k + 1 tokens costs at most ``tolerance`` one-token
        steps (0: already the pass over 2 tokens costs more)."""
        flat = 0
        for k, v in self.verify_costs.items():
            if v > tolerance:
                break
            flat = k
        return flat

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> PassProfile:
        return cls(**{**d, "pass_ms": tuple(d["pass_ms"])})


def measured_load(
    *,
    other_cores: float | None = None,
    cpu_share: float | None = None,
    spread: float | None = None,
    device: str = "cpu",
) -> tuple[str, ...]:
    """What made a measurement busy, in words, one sign each, of the signs it read (None: not read; empty: it was
    quiet): other processes' cores and the timing thread's share of a core (on a CPU only), and the spread of its
    repeated rounds. A profile reads all three; a race's lane the first two (it runs once); a live check the first."""
    on_cpu = device == "cpu"
    return tuple(
        said
        for busy, said in (
            (
                on_cpu and other_cores is not None and other_cores >= OTHER_WORK,
                f"other processes kept {other_cores or 0:.1f} cores busy",
            ),
            (
                on_cpu and cpu_share is not None and cpu_share < LOADED,
                f"the timing thread had {cpu_share or 0:.0%} of a core",
            ),
            (spread is not None and spread >= NOISY, f"repeated passes {spread or 0:.2f}× apart"),
        )
        if busy
    )


def profile_load(profile: PassProfile) -> tuple[str, ...]:
    """Every sign of load a profile's measurement read (:func:`measured_load`)."""
    return measured_load(
        other_cores=profile.other_cores, cpu_share=profile.cpu_share, spread=profile.spread, device=profile.device
    )


def load_words(profile: PassProfile) -> str:
    """What the load was while ``profile`` was measured, in words ("" where it was quiet)."""
    return "; ".join(profile_load(profile))


def weight_bytes(loaded: LoadedModel) -> int:
    """Bytes of the weights one step reads: every parameter but the input embedding (a step reads one row of it),
    and the matrices held outside the parameters (packed or int8); a tied output head is read as the head."""
    embedding = loaded.model.get_input_embeddings().weight
    assert isinstance(embedding, torch.Tensor), "an input embedding holds its table (or its shape) as its weight"
    parameters = list(loaded.model.parameters())
    tied = embedding is loaded.model.get_output_embeddings().weight
    total = sum(p.numel() * p.element_size() for p in parameters)
    total += sum(
        m.matrix_bytes for m in loaded.model.modules() if isinstance(m, Int4Linear | Int8Linear | PackedLinear)
    )
    counted = any(p is embedding for p in parameters)  # an int8 table is no parameter, and is not counted above
    return total if tied or not counted else total - embedding.numel() * embedding.element_size()


def forward_name(forward: ForwardFn) -> str:
    """What a profile's passes ran through: "full" for a model's own forward, else the forward's function and what its
    closure holds (a draft's head size, the layers a self-draft skips). So every drafter setting that does not shape the
    pass (a confidence exit ends a round; it changes no pass) reads the same profile, the one the CLI prints."""
    if forward is full_forward:
        return "full"
    held = inspect.getclosurevars(forward).nonlocals
    values = {name: sorted(value) if isinstance(value, frozenset) else value for name, value in held.items()}
    return f"{forward.__qualname__}({', '.join(f'{name}={value!r}' for name, value in sorted(values.items()))})"


def kernels_build(loaded: LoadedModel) -> str:
    """The build of the C kernels a quantised model's passes run (their sources, flags and CPU: a changed kernel is a
    new library, so its passes are measured again), empty for a model on torch's kernels."""
    return library_path("native").name if kernels_of(loaded.model) in QUANTISED else ""


def profile_file(loaded: LoadedModel, name: str) -> str:
    """The cache file of a model's profile on this machine through the forward called ``name`` (:func:`forward_name`),
    in its precision and kernel path."""
    key = "|".join(
        (
            loaded.spec,
            loaded.name,
            name,
            str(loaded.model.dtype),
            kernels_of(loaded.model),
            kernels_build(loaded),
            str(loaded.device),
            machine_key(),
            str(FORMAT),
        )
    )
    digest = hashlib.sha256(key.encode()).hexdigest()[:20]
    return str(cache_root() / "machine" / f"{loaded.name.replace('/', '_')}-{digest}.json")


_MEASURED: dict[str, tuple[PassProfile, float]] = {}  # this process's profiles by file, with when each was measured
# (time.monotonic())


def pass_profile(loaded: LoadedModel, forward: ForwardFn, on_progress: Progress | None = None) -> PassProfile:
    """The model's :class:`PassProfile` through ``forward``: this process's, else its cache file's (always quiet),
    else measured (seconds; up to ``ATTEMPTS`` times while the machine is busy), the first quiet one kept in the file
    (:func:`keep_if_quiet`), else the least loaded held by this process alone. A busy profile is measured again by
    each process that asks for it, and ``MEASURE_AGAIN_S`` later in a long-lived one, until a quiet one is kept; no
    process waits for a quiet machine, and nothing measured later replaces a quiet one."""
    path = profile_file(loaded, forward_name(forward))
    held, at = _MEASURED.get(path, (None, 0.0))
    if held is not None and (held.quiet or time.monotonic() - at < MEASURE_AGAIN_S):
        return held
    stored = read_profile(path)
    if stored is not None and stored.quiet:
        _MEASURED[path] = (stored, time.monotonic())
        return stored
    context = profile_context(loaded)
    attempts = [attempt for attempt in (held, stored) if attempt is not None]
    tries = 1 if attempts else ATTEMPTS  # a busy one is at hand: one more look, not a wait for a quiet machine
    for _ in range(tries):
        attempts.append(measured_profile(loaded, forward, context, on_progress))
        if attempts[-1].quiet:
            break
    profile = least_loaded(attempts)
    keep_if_quiet(path, profile)
    _MEASURED[path] = (profile, time.monotonic())
    return profile


def known_profile(loaded: LoadedModel, forward: ForwardFn) -> PassProfile | None:
    """The model's profile through ``forward`` where one is at hand without measuring anything: this process's, else
    its cache file's (quiet); None where it was never measured here (a page that opens measures nothing)."""
    path = profile_file(loaded, forward_name(forward))
    held = _MEASURED.get(path)
    return held[0] if held is not None else read_profile(path)


def read_profile(path: str) -> PassProfile | None:
    """The profile a cache file holds (quiet: :func:`keep_if_quiet`), None where there is none or it is unreadable."""
    try:
        with open(path, encoding="utf-8") as f:
            return PassProfile.from_dict(json.load(f))
    except (OSError, ValueError, TypeError, KeyError):
        return None


def measured_profile(
    loaded: LoadedModel, forward: ForwardFn, context: list[int], on_progress: Progress | None = None
) -> PassProfile:
    """One measurement of ``loaded``'s passes through ``forward`` after ``context``
    (:func:`~specviz.models.pass_timing.time_passes`), as a :class:`PassProfile`."""
    timed = time_passes(loaded, forward, context, on_progress=on_progress)
    return PassProfile(
        model=loaded.name,
        forward=forward_name(forward),
        dtype=str(loaded.model.dtype).replace("torch.", ""),
        kernels=kernels_of(loaded.model),
        device=str(loaded.device),
        cpu=cpu_name(),
        torch=torch.__version__,
        context=CONTEXT_TOKENS,
        pass_ms=timed.pass_ms,
        weight_bytes=weight_bytes(loaded),
        spread=timed.spread,
        cpu_share=timed.cpu_share,
        other_cores=timed.other_cores,
    )


def least_loaded(attempts: list[PassProfile]) -> PassProfile:
    """The quiet minimum of several measurements of one model's passes: a quiet one where there is one, else the one
    whose passes cost least in all (:func:`round_cost`: load only ever slows a pass, so the fastest was the least
    loaded)."""
    return min(attempts, key=lambda profile: (not profile.quiet, round_cost(profile)))


def keep_if_quiet(path: str, profile: PassProfile) -> bool:
    """Write ``profile`` to its cache file (atomically: a concurrent process reads all of it or measures too) where it
    was measured quiet and the file holds no quiet one yet; whether it was written. A busy profile is never kept: the
    pages would state a loaded machine's cost as this machine's."""
    if not profile.quiet or read_profile(path) is not None:
        return False
    write_json_atomically(Path(path), profile.to_dict())
    return True


def round_cost(profile: PassProfile) -> float:
    """What a kernel path is judged by: the sum of its passes over 1..9 tokens (the one-token steps of the target
    alone and of a draft, and every verification pass, weighed alike)."""
    return sum(profile.pass_ms)


KERNELS_VAR = "SPECVIZ_KERNELS"  # auto (the profile's choice) | default | onednn: a user's or a benchmark's override


def choose_kernels(loaded: LoadedModel, on_progress: Progress | None = None) -> str:
    """Put a freshly loaded model (not yet shared) on the kernel path whose profile costs least on this machine, and
    keep every measured profile on it (``loaded.profiles``). Only exact paths are compared: both multiply in the
    model's own precision; packing keeps one copy of each weight
    (:class:`~specviz.runtime.cpu.kernel_paths.PackedLinear`). ``$SPECVIZ_KERNELS`` names a path to take instead (each
    still profiled)."""
    quantised = kernels_of(loaded.model)
    if quantised in QUANTISED:  # quantised weights have one kernel: profile it
        loaded.profiles[quantised] = pass_profile(loaded, full_forward, on_progress)
        return quantised
    paths = KERNEL_PATHS if can_pack(loaded.model.dtype, loaded.device) else (DEFAULT,)
    for path in paths:
        use_kernels(loaded.model, path)
        loaded.profiles[path] = pass_profile(loaded, full_forward, on_progress)
    wanted = os.environ.get(KERNELS_VAR, "auto")
    chosen = wanted if wanted in paths else min(paths, key=lambda path: round_cost(loaded.profiles[path]))
    use_kernels(loaded.model, chosen)
    return chosen


def held_profile(loaded: LoadedModel) -> PassProfile:
    """The profile the model's kernel path holds now, busy or quiet (measured now only where it has none): what a page
    reads, for a page never measures the machine again while it serves a class (:func:`model_profile` does, on the
    work pool)."""
    held = loaded.profiles.get(kernels_of(loaded.model))
    return held if held is not None else model_profile(loaded)


def model_profile(loaded: LoadedModel) -> PassProfile:
    """The profile of the kernel path the model runs on now, kept with the model's: the loader's (measured now if it
    has none), and where that one was measured busy, :func:`pass_profile`'s (measured again ``MEASURE_AGAIN_S`` on)."""
    path = kernels_of(loaded.model)
    held = loaded.profiles.get(path)
    if held is None or not held.quiet:
        held = loaded.profiles[path] = pass_profile(loaded, full_forward)
    return held
