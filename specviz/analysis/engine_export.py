"""A specviz trace's speculative decoding in vLLM's names, so a class sees what vLLM would report for the run it just
stepped through: the Prometheus counters of ``/metrics`` (vllm/v1/spec_decode/metrics.py: ``SpecDecodingProm``,
counted as ``SpecDecodingStats.observe_draft`` counts) and the per-request ``metrics.speculative_decoding`` of
``--per-request-spec-decode-metrics detailed``. :func:`specviz.analysis.engine_report.read_engine_report` reads both
back to the trace's acceptance rate and mean acceptance length. No torch (the trace is only read)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from specviz.engine.trace import Trace

HELP = {
    "num_drafts": "Number of spec decoding drafts.",
    "num_draft_tokens": "Number of draft tokens.",
    "num_accepted_tokens": "Number of accepted tokens.",
    "num_accepted_tokens_per_pos": "Accepted tokens per draft position.",
}


def drafting_rounds(trace: Trace) -> list[tuple[int, int]]:
    """(drafted, accepted) tokens of each round that drafted (vLLM's drafts: a round with nothing drafted is a plain
    decoding step)."""
    return [(r.drafted_count, r.accepted_count) for r in trace.rounds if r.drafted_count]


def spec_tokens(trace: Trace) -> int:
    """vLLM's ``num_spec_tokens``: the most tokens a round could accept (a chain's block, a tree's depth)."""
    return max((r.realised_block for r in trace.rounds), default=0)


def accepted_per_position(trace: Trace) -> list[int]:
    """Drafts whose token at each position was accepted: a draft that accepted n tokens counts at positions 0..n-1."""
    accepted = [a for _, a in drafting_rounds(trace)]
    return [sum(a > i for a in accepted) for i in range(spec_tokens(trace))]


def vllm_prometheus(trace: Trace) -> str:
    """The four spec-decode counters in Prometheus' text format, labelled as vLLM labels one engine serving the
    trace's target (the ``_created`` samples left out)."""
    rounds = drafting_rounds(trace)
    model = str(trace.models.get("target", "specviz")).replace("\\", "\\\\").replace('"', '\\"')
    labels = f'engine="0",model_name="{model}"'
    samples = {
        "num_drafts": [("", len(rounds))],
        "num_draft_tokens": [("", sum(d for d, _ in rounds))],
        "num_accepted_tokens": [("", sum(a for _, a in rounds))],
        "num_accepted_tokens_per_pos": [(f',position="{i}"', n) for i, n in enumerate(accepted_per_position(trace))],
    }
    lines = []
    for name, values in samples.items():
        lines += [f"# HELP vllm:spec_decode_{name} {HELP[name]}", f"# TYPE vllm:spec_decode_{name} counter"]
        lines += [f"vllm:spec_decode_{name}_total{{{labels}{extra}}} {float(n)}" for extra, n in values]
    return "\n".join(lines) + "\n"


def vllm_request_metrics(trace: Trace) -> dict[str, Any]:
    """The trace as one vLLM response's ``metrics.speculative_decoding`` (level ``detailed``: with the ordered
    per-step arrays), under the response's ``metrics`` key."""
    rounds = drafting_rounds(trace)
    k = spec_tokens(trace)
    steps, drafted, accepted = len(rounds), sum(d for d, _ in rounds), sum(a for _, a in rounds)
    per_step = [a for _, a in rounds]
    return {
        "metrics": {
            "speculative_decoding": {
                "mean_acceptance_length": 1 + accepted / steps if steps else 1.0,
                "draft_acceptance_rate": accepted / drafted if drafted else 0.0,
                "acceptance_histogram": [per_step.count(j) for j in range(k + 1)],
                "num_spec_steps": steps,
                "num_accepted_draft_tokens": accepted,
                "num_draft_tokens": drafted,
                "num_spec_tokens": k,
                "per_step_accepted": per_step,
                "per_step_drafted": [d for d, _ in rounds],
            }
        }
    }


def vllm_request_json(trace: Trace) -> str:
    return json.dumps(vllm_request_metrics(trace), indent=2) + "\n"
