"""A specviz run's speculative decoding in vLLM's names, so a class sees what vLLM would report for the run it just
stepped through or raced: the Prometheus counters of ``/metrics`` (vllm/v1/spec_decode/metrics.py:
``SpecDecodingProm``, counted as ``SpecDecodingStats.observe_draft`` counts) and the per-request
``metrics.speculative_decoding`` of ``--per-request-spec-decode-metrics detailed``.
:func:`specviz.server_reports.reading.read_engine_report` reads both back to the run's acceptance rate and mean
acceptance length. No torch (the trace is only read)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from specviz.engine.trace import Trace

HELP = {
    "num_drafts": "Number of spec decoding drafts.",
    "num_draft_tokens": "Number of draft tokens.",
    "num_accepted_tokens": "Number of accepted tokens.",
    "num_accepted_tokens_per_pos": "Accepted tokens per draft position.",
}


@dataclass(frozen=True)
class DraftingRun:
    """What vLLM counts of one speculative run: each drafting round's (drafted, accepted) tokens (a round that
    drafted nothing is a plain decoding step, no draft), ``spec_tokens`` (vLLM's ``num_spec_tokens``: the most tokens
    a round could accept, a chain's block or a tree's depth) and the target's name (the ``model_name`` label). A
    trace gives one (:func:`drafting_run`); a race's speculative lane keeps its own."""

    model: str
    rounds: tuple[tuple[int, int], ...]
    spec_tokens: int

    @property
    def drafted(self) -> int:
        return sum(d for d, _ in self.rounds)

    @property
    def accepted(self) -> int:
        return sum(a for _, a in self.rounds)

    @property
    def accepted_per_step(self) -> list[int]:
        return [a for _, a in self.rounds]

    def accepted_per_position(self) -> list[int]:
        """Drafts whose token at each position was accepted: a draft that accepted n tokens counts at 0..n-1."""
        return [sum(a > i for a in self.accepted_per_step) for i in range(self.spec_tokens)]


def drafting_run(trace: Trace) -> DraftingRun:
    """The trace's drafting rounds as vLLM counts them."""
    return DraftingRun(
        str(trace.models.get("target", "specviz")),
        tuple((r.drafted_count, r.accepted_count) for r in trace.rounds if r.drafted_count),
        max((r.realised_block for r in trace.rounds), default=0),
    )


def vllm_prometheus(run: DraftingRun) -> str:
    """The four spec-decode counters in Prometheus' text format, labelled as vLLM labels one engine serving the
    run's target (the ``_created`` samples left out)."""
    model = run.model.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    labels = f'engine="0",model_name="{model}"'
    samples = {
        "num_drafts": [("", len(run.rounds))],
        "num_draft_tokens": [("", run.drafted)],
        "num_accepted_tokens": [("", run.accepted)],
        "num_accepted_tokens_per_pos": [(f',position="{i}"', n) for i, n in enumerate(run.accepted_per_position())],
    }
    lines = []
    for name, values in samples.items():
        lines += [f"# HELP vllm:spec_decode_{name} {HELP[name]}", f"# TYPE vllm:spec_decode_{name} counter"]
        lines += [f"vllm:spec_decode_{name}_total{{{labels}{extra}}} {float(n)}" for extra, n in values]
    return "\n".join(lines) + "\n"


def vllm_request_metrics(run: DraftingRun) -> dict[str, Any]:
    """The run as one vLLM response's ``metrics.speculative_decoding`` (level ``detailed``: with the ordered
    per-step arrays), under the response's ``metrics`` key."""
    steps, drafted, accepted, per_step = len(run.rounds), run.drafted, run.accepted, run.accepted_per_step
    return {
        "metrics": {
            "speculative_decoding": {
                "mean_acceptance_length": 1 + accepted / steps if steps else 1.0,
                "draft_acceptance_rate": accepted / drafted if drafted else 0.0,
                "acceptance_histogram": [per_step.count(j) for j in range(run.spec_tokens + 1)],
                "num_spec_steps": steps,
                "num_accepted_draft_tokens": accepted,
                "num_draft_tokens": drafted,
                "num_spec_tokens": run.spec_tokens,
                "per_step_accepted": per_step,
                "per_step_drafted": [d for d, _ in run.rounds],
            }
        }
    }


def vllm_request_json(run: DraftingRun) -> str:
    return json.dumps(vllm_request_metrics(run), indent=2) + "\n"
