"""vLLM's three reports of speculative decoding, read into an :class:`EngineReport` (formats and their sources:
docs/engine_report.md): the Prometheus counters of ``/metrics``, the ``SpecDecoding metrics:`` log line and the
per-request ``metrics.speculative_decoding`` of ``--per-request-spec-decode-metrics``. No torch."""

from __future__ import annotations

from collections import Counter
from typing import Any

from specviz.analysis.engine_record import (
    FLOAT,
    INT,
    EngineReport,
    agree_with_length,
    count,
    field,
    length_of,
    number,
    objects_with,
    prometheus_samples,
    rates,
    report,
    required,
    share,
)
from specviz.settings import ConfigError

PREFIX = "vllm:spec_decode_"
COUNTERS = ("num_drafts", "num_draft_tokens", "num_accepted_tokens", "num_accepted_tokens_per_pos")
LOG_MARK = "SpecDecoding metrics:"
REQUEST_KEYS = ("acceptance_histogram", "num_spec_steps", "num_accepted_draft_tokens", "num_draft_tokens")


def from_prometheus(text: str) -> EngineReport:
    """The four counters (with or without ``_total``; ``_created`` skipped), summed over their label sets (one
    per engine of a data-parallel server); per position by its ``position`` label, 0 first."""
    what = "vLLM's /metrics text"
    totals: Counter[str] = Counter()
    per_pos: Counter[int] = Counter()
    for name, labels, value in prometheus_samples(text, PREFIX, what):
        base = name[len(PREFIX) :].removesuffix("_total")
        if base not in COUNTERS:
            continue
        totals[base] += (n := count(value, f"{what}: {name}"))
        if base == "num_accepted_tokens_per_pos":
            per_pos[count(labels.get("position"), f"{what}: the position label of {name}")] += n
    missing = [f"{PREFIX}{name}_total" for name in COUNTERS[1:3] if name not in totals]
    if missing:
        raise ConfigError(f"{what}: expected {' and '.join(missing)} in it (a paste cut short?)")
    drafts = totals["num_drafts"] if "num_drafts" in totals else None
    positions = None
    if per_pos:
        if sorted(per_pos) != list(range(len(per_pos))):
            raise ConfigError(f"{what}: per-position counters for positions {sorted(per_pos)}; expected 0, 1, 2, ...")
        if per_pos.total() != totals["num_accepted_tokens"]:
            raise ConfigError(
                f"{what}: the per-position counters add up to {per_pos.total()} accepted tokens, "
                f"num_accepted_tokens says {totals['num_accepted_tokens']}"
            )
        positions = tuple(per_pos[i] / drafts for i in range(len(per_pos))) if drafts else None
    return report(
        "vllm",
        "Prometheus /metrics",
        accepted=totals["num_accepted_tokens"],
        draft_tokens=totals["num_draft_tokens"],
        drafts=drafts,
        per_position=positions,
        draft_length=len(per_pos) or None,
    )


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
    per_position = tuple(sum(histogram[j] for j in range(i, k + 1)) / steps for i in range(1, k + 1)) if steps else None
    return report(
        "vllm",
        "per-request JSON",
        accepted=accepted,
        draft_tokens=drafted,
        drafts=steps,
        per_position=per_position,
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
    if "per_step_accepted" in metrics:
        per_step = counts(metrics["per_step_accepted"], f"{what}: per_step_accepted")
        if Counter(per_step) != Counter({j: n for j, n in enumerate(hist) if n}):
            raise ConfigError(f"{what}: per_step_accepted does not give the acceptance_histogram")
    if "per_step_drafted" in metrics and sum(counts(metrics["per_step_drafted"], what)) != drafted:
        raise ConfigError(f"{what}: per_step_drafted does not add up to num_draft_tokens {drafted}")
    rate = metrics.get("draft_acceptance_rate")
    if drafted and rate is not None and abs(share(rate, f"{what}: draft_acceptance_rate") - accepted / drafted) > 1e-6:
        raise ConfigError(f"{what}: draft_acceptance_rate {rate} is not {accepted} / {drafted} accepted / drafted")
    if steps and (printed := metrics.get("mean_acceptance_length")) is not None:
        length_of(accepted, steps, number(printed, f"{what}: mean_acceptance_length"), what)
    return hist, drafted


def counts(values: object, what: str) -> list[int]:
    """A JSON list of counts (ConfigError for anything else)."""
    if not isinstance(values, list):
        raise ConfigError(f"{what} should be a list of counts; got {values!r}")
    return [count(n, f"{what}[{j}]") for j, n in enumerate(values)]
