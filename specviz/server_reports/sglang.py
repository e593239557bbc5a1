"""SGLang's reports of speculative decoding, read into an :class:`EngineReport` (formats and their sources:
docs/engine_report.md): the scheduler's ``Decode batch`` log line (``accept len: L, accept rate: r``) and its
Prometheus gauges ``sglang:spec_accept_length`` and ``sglang:spec_accept_rate`` (two ratios over the last logging
window, no counts), and the ``meta_info`` of a ``/generate`` response (a request's verification steps, its accepted
and proposed draft tokens, their histogram). No torch."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from statistics import fmean
from typing import Any, NamedTuple

from specviz.server_reports.record import (
    FLOAT,
    EngineReport,
    count,
    counts,
    field,
    number,
    objects_with,
    prometheus_samples,
    reached,
    report,
    required,
    share,
)
from specviz.settings import ConfigError

LOG_MARK = "accept len:"
PREFIX = "sglang:spec_"
META_MARK = "spec_verify_ct"
# a request's accepted and proposed draft tokens and its histogram in meta_info, the current name first, then the
# ones older builds wrote (tokenizer_manager.py, _calculate_spec_decoding_metrics)
CORRECT = ("spec_num_correct_drafts", "spec_accepted_drafts", "spec_accept_token_num")
PROPOSED = ("spec_num_proposed_drafts", "spec_proposed_drafts", "spec_draft_token_num")
HISTOGRAM = ("spec_correct_drafts_histogram", "spec_accept_histogram")


def draft_length_and_rate(length: float, rate: float) -> tuple[int | None, float | None]:
    """(k, accepted drafts / proposed drafts) from SGLang's accept length L (accepted drafts + the bonus token per
    verification, scheduler_metrics_mixin.py's ``update_spec_metrics``) and its printed accept rate r. SGLang prints
    r = (L - 1) / k since PR #23530 (2026-04), L / (k + 1) from PR #11572 (2025-10) until then (the bonus token in
    both counts). The reading whose k comes out whole (to the printed decimals) is the build's; a tie reads as the
    current one."""
    if rate <= 0:
        return None, 0.0 if length == 1 else None
    current, older = (length - 1) / rate, length / rate - 1
    if abs(older - round(older)) < abs(current - round(current)) and round(older) >= 1:
        return round(older), (length - 1) / round(older)
    return (round(current) or None), rate


def from_decode_log(text: str) -> EngineReport:
    """The ``Decode batch`` lines (one per ``--decode-log-interval`` steps): each window's accept length and rate,
    their mean over the windows (SGLang prints no counts to weigh them by)."""
    windows = []
    for n, line in enumerate(text.splitlines(), 1):
        if LOG_MARK not in line:
            continue
        what = f"SGLang's decode log line {n}"
        length = number(required(field(line, LOG_MARK, FLOAT, what), "accept len: L", what), what)
        rate = field(line, "accept rate:", FLOAT, what)
        windows.append((length, None if rate is None else number(rate, what), what))
    return _read("decode log", windows)


def from_prometheus(text: str) -> EngineReport:
    """The gauges (the last logging window), their mean over label sets (one per rank). Where the server also exports
    ``spec_num_draft_tokens`` (newer builds, whose accept rate is the current one), k is its value - 1 (the
    draft's root is the token before it)."""
    what = "SGLang's /metrics text"
    values: dict[str, list[float]] = {}
    for name, _, value in prometheus_samples(text, PREFIX, what):
        values.setdefault(name.removeprefix(PREFIX), []).append(number(value, f"{what}: {name}"))
    if "accept_length" not in values:
        raise ConfigError(f"{what}: expected sglang:spec_accept_length in it (a paste cut short?)")
    length = fmean(values["accept_length"])
    rate = fmean(values["accept_rate"]) if "accept_rate" in values else None
    if "num_draft_tokens" not in values:
        return _read("Prometheus gauges", [(length, rate, what)])
    k = round(fmean(values["num_draft_tokens"])) - 1
    if rate is None and k > 0:
        rate = (length - 1) / k
    return report(
        "sglang",
        "Prometheus gauges",
        accepted=None,
        draft_tokens=None,
        printed_length=length,
        printed_rate=rate,
        draft_length=k if k > 0 else None,
    )


def _read(source: str, windows: list[tuple[float, float | None, str]]) -> EngineReport:
    if not windows:
        raise ConfigError(f"SGLang's {source}: no 'accept len:' in it")
    readings = []
    for length, rate, what in windows:
        if length < 1:
            raise ConfigError(f"{what}: accept len {length} is below 1 (it counts the bonus token)")
        if rate is not None and not 0 <= rate <= 1:
            raise ConfigError(f"{what}: accept rate {rate} is not between 0 and 1")
        readings.append(draft_length_and_rate(length, rate) if rate is not None else (None, None))
    ks = {k for k, _ in readings}
    rates = [r for _, r in readings if r is not None]
    return report(
        "sglang",
        source,
        accepted=None,
        draft_tokens=None,
        printed_length=fmean(length for length, _, _ in windows),
        printed_rate=fmean(rates) if len(rates) == len(readings) else None,
        draft_length=ks.pop() if len(ks) == 1 else None,
    )


class Request(NamedTuple):
    """One request's speculative counts from its meta_info (None where its build does not write them)."""

    verify: int  # verification steps (target passes over a draft)
    correct: int | None  # accepted draft tokens
    proposed: int | None  # proposed draft tokens: verify * (speculative_num_draft_tokens - 1)
    histogram: list[int] | None  # index j: the steps that accepted j draft tokens
    length: float | None  # SGLang's accept length: completion_tokens / verify (the prefill's token included)
    rate: float | None


def from_meta_info(data: Any) -> EngineReport:
    """The ``meta_info`` of one ``/generate`` response or of a list of them (python/sglang/srt/managers/
    tokenizer_manager.py, ``_calculate_spec_decoding_metrics``, written when a request finishes): ``spec_verify_ct``,
    ``spec_num_correct_drafts`` of ``spec_num_proposed_drafts`` (``spec_accepted_drafts`` / ``spec_proposed_drafts``,
    ``spec_accept_token_num`` / ``spec_draft_token_num`` in older builds), ``spec_correct_drafts_histogram``
    (``spec_accept_histogram``), and the ratios ``spec_accept_rate`` = accepted / proposed and ``spec_accept_length``
    = ``completion_tokens`` / ``spec_verify_ct``, both checked. The counts are summed over the requests: drafts are
    the verification steps, the mean acceptance length 1 + accepted / drafts as vLLM counts it (SGLang's own accept
    length also counts the prefill's token), per position from the histogram up to the most a step accepted (SGLang
    sizes it so), k the proposed tokens per step. Builds that write only ``spec_verify_ct`` give SGLang's accept
    length (``completion_tokens`` over the steps) alone."""
    what = "SGLang's meta_info"
    found = [_request(meta, f"{what} of request {n}") for n, meta in enumerate(objects_with(data, META_MARK), 1)]
    requests = [r for r in found if r.verify]
    if not requests:
        raise ConfigError(
            f"{what}: expected a /generate response's meta_info with spec_verify_ct above 0"
            + (" (it is 0: speculative decoding never ran)" if found else "")
        )
    steps = sum(r.verify for r in requests)
    if any(r.correct is None or r.proposed is None for r in requests):  # a build without the counts
        lengths = [r.length for r in requests]
        if any(length is None for length in lengths):
            raise ConfigError(f"{what}: expected {CORRECT[0]} and {PROPOSED[0]}, or completion_tokens, in each")
        rates = [r.rate for r in requests]
        return report(
            "sglang",
            "per-request meta_info",
            accepted=None,
            draft_tokens=None,
            printed_length=sum(r.verify * (r.length or 0) for r in requests) / steps,
            printed_rate=None if None in rates else sum(r.verify * (r.rate or 0) for r in requests) / steps,
        )
    histogram: Counter[int] = Counter()
    for r in requests:
        histogram.update(dict(enumerate(r.histogram or ())))
    per_step = {(r.proposed or 0) / r.verify for r in requests}  # k: one for all requests, whole
    k = per_step.pop() if len(per_step) == 1 else 0.5
    return report(
        "sglang",
        "per-request meta_info",
        accepted=sum(r.correct or 0 for r in requests),
        draft_tokens=sum(r.proposed or 0 for r in requests),
        drafts=steps,
        per_position=reached(histogram, max(histogram)) if all(r.histogram for r in requests) else None,
        draft_length=int(k) if k == int(k) and k else None,
    )


def _request(meta: dict[str, Any], what: str) -> Request:
    """One meta_info's counts, checked against each other and against the ratios SGLang computed from them."""
    verify = count(meta[META_MARK], f"{what}: {META_MARK}")
    accepted, drafted = _value(meta, CORRECT, count, what), _value(meta, PROPOSED, count, what)
    histogram = _value(meta, HISTOGRAM, counts, what)
    rate, length = _value(meta, ("spec_accept_rate",), share, what), _value(meta, ("spec_accept_length",), number, what)
    tokens = _value(meta, ("completion_tokens",), count, what)
    if accepted is not None and drafted is not None and accepted > drafted:
        raise ConfigError(f"{what}: {accepted} accepted of {drafted} proposed draft tokens is impossible")
    if histogram is not None and (sum(histogram), sum(j * n for j, n in enumerate(histogram))) != (verify, accepted):
        raise ConfigError(
            f"{what}: the histogram {histogram} (index j: steps that accepted j) does not give {verify} steps and "
            f"{accepted} accepted draft tokens"
        )
    if rate is not None and accepted is not None and drafted and abs(rate - accepted / drafted) > 1e-6:
        raise ConfigError(f"{what}: spec_accept_rate {rate} is not {accepted} accepted / {drafted} proposed")
    if verify and tokens is not None:
        if length is not None and abs(length - tokens / verify) > 1e-6 * length:
            raise ConfigError(f"{what}: spec_accept_length {length} is not {tokens} completion tokens / {verify} steps")
        length = tokens / verify
    return Request(verify, accepted, drafted, histogram, length, rate)


def _value(meta: dict[str, Any], names: tuple[str, ...], read: Callable[[object, str], Any], what: str) -> Any:
    """The first of ``names`` (one field's name in successive builds) that ``meta`` has, read by ``read``; None
    where it has none."""
    name = next((name for name in names if meta.get(name) is not None), None)
    return None if name is None else read(meta[name], f"{what}: {name}")
