"""vLLM's reports of speculative decoding, read into an :class:`EngineReport` (formats and their sources:
docs/engine_report.md): the Prometheus counters of ``/metrics``, the ``SpecDecoding metrics:`` log line, the
per-request ``metrics.speculative_decoding`` of ``--per-request-spec-decode-metrics summary`` and the ordered
per-step arrays the ``detailed`` level adds. No torch."""

from __future__ import annotations

from collections import Counter
from typing import Any

from specviz.server_reports.record import (
    FLOAT,
    INT,
    EngineReport,
    agree_with_length,
    count,
    counts,
    field,
    length_of,
    number,
    objects_with,
    rates,
    reached,
    report,
    required,
    share,
    spec_decode_counters,
)
from specviz.settings import ConfigError

PREFIX = "vllm:spec_decode_"
LOG_MARK = "SpecDecoding metrics:"
REQUEST_KEYS = ("acceptance_histogram", "num_spec_steps", "num_accepted_draft_tokens", "num_draft_tokens")
STEP_KEYS = ("per_step_accepted", "per_step_drafted")  # the detailed level's ordered per-step arrays


def from_prometheus(text: str) -> EngineReport:
    """The four counters (:func:`~specviz.server_reports.record.spec_decode_counters`), summed over their label
    sets (one per engine of a data-parallel server)."""
    return spec_decode_counters(text, PREFIX, "vllm", "vLLM's /metrics text")


def from_log(text: str) -> EngineReport:
    """Every ``SpecDecoding metrics:`` line, one per logging interval (the counts reset after each): the counts
    summed. A line's drafts are its drafted tokens over its positions (each draft holds ``num_speculative_tokens``),
    so the windows' mean acceptance lengths and per-position rates combine exactly; a line without positions (before
    vLLM 0.9) gives the acceptance rate alone."""
    windows = [_log_window(line, n) for n, line in enumerate(text.splitlines(), 1) if LOG_MARK in line]
    windows = [w for w in windows if w[1]]  # a window that drafted nothing prints nan
    if not windows:
        raise ConfigError("vLLM's SpecDecoding metrics lines report no drafted tokens: speculation never ran")
    accepted, drafted = sum(w[0] for w in windows), sum(w[1] for w in windows)
    lengths = {len(w[2]) for w in windows}
    k = lengths.pop() if len(lengths) == 1 else 0
    if k and all(w[1] % k == 0 for w in windows):
        for accepted_here, drafted_here, _, printed, n in windows:
            length_of(accepted_here, drafted_here // k, printed, f"vLLM's SpecDecoding metrics line {n}")
        weights = [w[1] // k for w in windows]  # each window's drafts
        drafts: int | None = sum(weights)
        printed = None
    else:  # drafts shorter than k somewhere (structured output): windows weighed by their drafted tokens
        weights, drafts = [w[1] for w in windows], None
        printed = weighed([w[3] for w in windows], weights) if all(w[3] is not None for w in windows) else None
    per_position = tuple(weighed([w[2][i] for w in windows], weights) for i in range(k)) if k else None
    return report(
        "vllm",
        "SpecDecoding metrics log",
        accepted=accepted,
        draft_tokens=drafted,
        drafts=drafts,
        printed_length=printed,
        per_position=per_position,
        draft_length=k or None,
    )


def weighed(values: list[Any], weights: list[int]) -> float:
    return sum(v * w for v, w in zip(values, weights, strict=True)) / sum(weights)


def _log_window(line: str, n: int) -> tuple[int, int, tuple[float, ...], float | None, int]:
    """(accepted, drafted, per-position rates, printed mean acceptance length, line number) of one log line."""
    what = f"vLLM's SpecDecoding metrics line {n}"
    accepted = count(required(field(line, "Accepted:", INT, what), "Accepted: N tokens", what), what)
    drafted = count(required(field(line, "Drafted:", INT, what), "Drafted: N tokens", what), what)
    listed = field(line, "Per-position acceptance rate:", r"((?:-?\d+(?:\.\d+)?(?:,\s*)?)+)", what)
    printed = field(line, "Mean acceptance length:", FLOAT, what)
    length = number(printed, what) if printed else None
    per_position = rates(listed, what) if listed else ()
    if per_position:
        agree_with_length(per_position, length, what)
    return accepted, drafted, per_position, length, n


def from_request_json(data: Any) -> EngineReport:
    """``metrics.speculative_decoding`` of one response (or of each response in a list, summed): the histogram
    of accepted drafts per verification step must sum to the steps and to the accepted tokens; per position i the
    share of steps that accepted at least i drafts."""
    what = "vLLM's metrics.speculative_decoding"
    if not (found := objects_with(data, "acceptance_histogram")):
        if objects_with(data, "speculative_decoding"):
            raise ConfigError(
                f"{what} is null: vLLM reports it for n == 1 requests of a server started with "
                "--per-request-spec-decode-metrics summary or detailed"
            )
        raise ConfigError(f"{what}: expected an object with {', '.join(REQUEST_KEYS)}")
    histogram: Counter[int] = Counter()
    drafted = 0
    for metrics in found:
        hist, drafted_here = _request(metrics, what)
        histogram.update(dict(enumerate(hist)))
        drafted += drafted_here
    steps, k = histogram.total(), max(histogram)
    accepted = sum(j * n for j, n in histogram.items())
    return report(
        "vllm",
        "per-request JSON",
        accepted=accepted,
        draft_tokens=drafted,
        drafts=steps,
        per_position=reached(histogram, k),
        draft_length=k,
    )


def _request(metrics: dict[str, Any], what: str) -> tuple[list[int], int]:
    """(histogram, drafted tokens) of one request's object, its parts checked against each other."""
    missing = [key for key in REQUEST_KEYS if key not in metrics]
    if missing:
        raise ConfigError(f"{what}: expected {', '.join(missing)} in it (a paste cut short?)")
    hist = counts(metrics["acceptance_histogram"], f"{what}: acceptance_histogram")
    steps = count(metrics["num_spec_steps"], f"{what}: num_spec_steps")
    accepted = count(metrics["num_accepted_draft_tokens"], f"{what}: num_accepted_draft_tokens")
    drafted = count(metrics["num_draft_tokens"], f"{what}: num_draft_tokens")
    if not hist or sum(hist) != steps:
        raise ConfigError(f"{what}: the acceptance_histogram sums to {sum(hist)} steps, num_spec_steps is {steps}")
    if (held := sum(j * n for j, n in enumerate(hist))) != accepted:
        raise ConfigError(
            f"{what}: the acceptance_histogram holds {held} accepted drafts (index j counts the steps that "
            f"accepted j), num_accepted_draft_tokens is {accepted}"
        )
    rate = metrics.get("draft_acceptance_rate")
    if drafted and rate is not None and abs(share(rate, f"{what}: draft_acceptance_rate") - accepted / drafted) > 1e-6:
        raise ConfigError(f"{what}: draft_acceptance_rate {rate} is not {accepted} / {drafted} accepted / drafted")
    if steps and (printed := metrics.get("mean_acceptance_length")) is not None:
        length_of(accepted, steps, number(printed, f"{what}: mean_acceptance_length"), what)
    return hist, drafted


def from_request_steps(data: Any) -> EngineReport:
    """The ordered per-step arrays of ``--per-request-spec-decode-metrics detailed`` (vLLM's docs, "Per-Request
    Acceptance Metrics": ``summary`` plus ``per_step_accepted`` and ``per_step_drafted``, one entry per verification
    step, in order), in a response's ``metrics.speculative_decoding`` (whose summary is checked as
    :func:`from_request_json` checks it, and against the steps) or in the offline output's ``spec_decode_metrics``
    (``histogram``, ``num_draft_tokens``, ``num_spec_tokens`` beside the arrays); a list of either pools its steps.
    Each step is one draft: the drafts are the steps, the drafted and accepted tokens their sums, per position i the
    share of steps that accepted at least i (a step that drafted fewer counts as not reaching it, as vLLM counts), k
    the engine's ``num_spec_tokens`` (else the longest draft)."""
    what = "vLLM's per-step metrics (detailed)"
    steps: list[tuple[int, int]] = []
    k = 0
    for metrics in objects_with(data, STEP_KEYS[0]):
        steps += _steps(metrics, what)
        if metrics.get("num_spec_tokens") is not None:
            k = max(k, count(metrics["num_spec_tokens"], f"{what}: num_spec_tokens"))
    if not steps:
        raise ConfigError(f"{what}: {STEP_KEYS[0]} lists no verification step: speculative decoding never ran")
    k = k or max(drafted for drafted, _ in steps)
    return report(
        "vllm",
        "per-request JSON, per step",
        accepted=sum(accepted for _, accepted in steps),
        draft_tokens=sum(drafted for drafted, _ in steps),
        drafts=len(steps),
        per_position=reached(Counter(accepted for _, accepted in steps), k),
        draft_length=k,
    )


def _steps(metrics: dict[str, Any], what: str) -> list[tuple[int, int]]:
    """(drafted, accepted) of each step of one request, checked against each other and against the request's
    histogram and drafted tokens where it has them."""
    if STEP_KEYS[1] not in metrics:
        raise ConfigError(f"{what}: {STEP_KEYS[0]} without {STEP_KEYS[1]} (a paste cut short?)")
    accepted, drafted = (counts(metrics[key], f"{what}: {key}") for key in STEP_KEYS)
    if len(accepted) != len(drafted):
        raise ConfigError(f"{what}: {len(accepted)} steps in {STEP_KEYS[0]}, {len(drafted)} in {STEP_KEYS[1]}")
    if bad := next(((n, a, d) for n, (a, d) in enumerate(zip(accepted, drafted), 1) if a > d), None):
        raise ConfigError(f"{what}: step {bad[0]} accepted {bad[1]} of {bad[2]} drafted tokens, which is impossible")
    hist, total = metrics.get("histogram"), metrics.get("num_draft_tokens")
    if "acceptance_histogram" in metrics:  # a response's summary: its own checks first
        hist, total = _request(metrics, what)
    if hist is not None and Counter(accepted) != +Counter(dict(enumerate(counts(hist, f"{what}: histogram")))):
        raise ConfigError(f"{what}: {STEP_KEYS[0]} does not give the histogram (index j: steps that accepted j)")
    if total is not None and sum(drafted) != count(total, f"{what}: num_draft_tokens"):
        raise ConfigError(f"{what}: {STEP_KEYS[1]} adds up to {sum(drafted)} tokens, num_draft_tokens is {total}")
    return list(zip(drafted, accepted, strict=True))
