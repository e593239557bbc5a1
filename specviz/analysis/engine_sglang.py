"""SGLang's reports of speculative decoding, read into an :class:`EngineReport` (formats and their sources:
docs/engine_report.md): the scheduler's ``Decode batch`` log line (``accept len: L, accept rate: r``) and its
Prometheus gauges ``sglang:spec_accept_length`` and ``sglang:spec_accept_rate``. SGLang prints no counts, only these
two ratios over the last logging window. No torch."""

from __future__ import annotations

from statistics import fmean

from specviz.analysis.engine_record import FLOAT, EngineReport, field, number, prometheus_samples, report, required
from specviz.settings import ConfigError

LOG_MARK = "accept len:"
PREFIX = "sglang:spec_"


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
