"""Traces as tables: one row per token a round drafted or emitted (for CSV export and pages)."""

from __future__ import annotations

import pandas as pd

from specviz.engine.trace import Trace

KIND_ACCEPTED, KIND_REJECTED, KIND_DISCARDED = "accepted draft", "rejected draft", "not verified"
KIND_CORRECTION, KIND_BONUS = "correction", "bonus"


def token_table(trace: Trace) -> pd.DataFrame:
    """Every drafted token (accepted, rejected, not verified) and every correction / bonus token."""
    rows = []
    for r in trace.rounds:
        for pos in r.draft:
            kind = {"accepted": KIND_ACCEPTED, "rejected": KIND_REJECTED}.get(pos.status, KIND_DISCARDED)
            rows.append(
                dict(
                    round=r.index + 1,
                    position=pos.index + 1,
                    kind=kind,
                    token_id=pos.token_id,
                    text=pos.text,
                    p=pos.p,
                    q=pos.q,
                    accept_prob=pos.accept_prob,
                    uniform=pos.uniform,
                    tau_gap=pos.tau_gap,
                    emitted=pos.accepted,
                )
            )
        for token, kind in ((r.correction, KIND_CORRECTION), (r.bonus, KIND_BONUS)):
            if token is not None:
                rows.append(
                    dict(
                        round=r.index + 1,
                        position=len(r.draft) + 1 if kind == KIND_BONUS else None,
                        kind=kind,
                        token_id=token.token_id,
                        text=token.text,
                        p=token.target_prob,
                        q=None,
                        accept_prob=None,
                        uniform=None,
                        tau_gap=None,
                        emitted=True,
                    )
                )
    return pd.DataFrame(
        rows,
        columns=[
            "round",
            "position",
            "kind",
            "token_id",
            "text",
            "p",
            "q",
            "accept_prob",
            "uniform",
            "tau_gap",
            "emitted",
        ],
    )


def emitted_tokens(trace: Trace) -> list[tuple[int, str, str]]:
    """(round, text, kind) for each output token, in order: how each token of the output came to be."""
    out = []
    for r in trace.rounds:
        for pos in (p for p in r.draft if p.accepted):
            out.append((r.index + 1, pos.text, KIND_ACCEPTED))
        for token, kind in ((r.correction, KIND_CORRECTION), (r.bonus, KIND_BONUS)):
            if token is not None:
                out.append((r.index + 1, token.text, kind))
    return out
