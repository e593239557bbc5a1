"""A round as the seed diagrams draw it, in HTML: rows of token boxes with checks and crosses.

Rows (Xia et al. 2023, Fig. 1; Zhang et al. 2023, Fig. 1): Prompt; Decoder input (prefix + [MASK]
per drafted slot); Draft; Verify (a check or a cross on each drafted token, the target's best
candidates under it, a rejected token struck through with the correction above it, the bonus
token when all were accepted); Output; Next input (output + [MASK] x gamma).
Pure functions from trace records to HTML fragments; whoever shows them includes the stylesheet
``CSS`` once (the lesson player in its head, a Streamlit page before its fragment).
"""

from __future__ import annotations

import html

from specviz.engine.trace import ACCEPTED, REJECTED, DraftPosition, Round, Trace
from specviz.presentation.boxes import COLORS, display_text, row_html, token_box
from specviz.presentation.tables import KIND_ACCEPTED, KIND_BONUS, KIND_CORRECTION, emitted_tokens
from specviz.registry.drafters import drafter_entry
from specviz.registry.rules import RuleEntry, rule_entry

KIND_STYLE = {KIND_ACCEPTED: "accepted", KIND_CORRECTION: "correction", KIND_BONUS: "bonus"}
CONTEXT_TAIL = 5  # prefix tokens shown before each round's new tokens
PROJECTOR_TAIL = 2  # of those, the ones a projector shows (the chat template's tokens would take its width)
CSS = """
<style>
.sv-rows {font-family: ui-monospace, Menlo, Consolas, monospace; font-size: 14px; overflow-x: auto;}
.sv-row {display: flex; align-items: flex-end; gap: 4px; margin: 6px 0; min-height: 34px;}
.sv-label {width: 120px; flex: none; font-weight: 600; color: #333; font-family: sans-serif; align-self: center;}
.sv-col {display: flex; flex-direction: column; align-items: center; gap: 2px;}
.sv-above {min-height: 28px; display: flex; align-items: flex-end;}
.sv-verify {align-items: flex-start;}
.sv-tok {border: 1.5px solid; border-radius: 6px; padding: 3px 7px; white-space: pre; line-height: 20px;}
.sv-mask {border-style: dashed;}
.sv-struck {text-decoration: line-through; text-decoration-thickness: 2px;}
.sv-mark {font-weight: 700; font-size: 15px; line-height: 16px;}
.sv-cand {font-size: 11px; color: #555; white-space: pre; line-height: 13px;}
.sv-cand b {color: #1b5e20;}
.sv-ellipsis {color: #999; align-self: center;}
.sv-note {font-family: sans-serif; font-size: 12px; font-style: italic; color: #78909c; align-self: center;}
.sv-prompt {font-family: sans-serif; background: #fafafa; border: 1px solid #ddd; border-radius: 6px; padding: 4px 8px;
            max-width: 900px; white-space: pre-wrap;}
.sv-legend {display: flex; gap: 10px; flex-wrap: wrap; font-family: sans-serif; font-size: 13px; margin: 4px 0 8px;}
.sv-out {font-family: ui-monospace, Menlo, Consolas, monospace; line-height: 28px; font-size: 14px;}
.sv-out span {border-radius: 3px; padding: 1px 0; white-space: pre-wrap;}
.sv-out .sv-r0 {border-bottom: 2px solid #90a4ae;} .sv-out .sv-r1 {border-bottom: 2px dotted #90a4ae;}
</style>
"""


def script_safe(json_text: str) -> str:
    """JSON with no ``<`` left in it (written ``\\u003c``, still the same JSON), so no text in it can end or
    comment out the <script> element it is embedded in."""
    return json_text.replace("<", "\\u003c")


NO_SLOTS = (
    '<span class="sv-note">no [MASK] slots: this drafter needs no placeholders to draft into (SpecDec\'s '
    'drafter appends k [MASK] tokens and fills them in one pass: pick the "[MASK] queries" drafter to see '
    "it)</span>"
)
ENDED = '<span class="sv-note">end of sequence: nothing follows</span>'


def _masks(n: int) -> list[str]:
    return [token_box("[MASK]", "mask", mask=True) for _ in range(n)]


def _prefix_tail(trace: Trace, rnd: Round) -> list[str]:
    """The last few tokens before this round (output so far, else the end of the prompt)."""
    generated = rnd.prefix_len - len(trace.prompt_ids)
    texts = [t for r in trace.rounds[: rnd.index] for t in r.emitted_texts] if generated else trace.prompt_tokens
    tail = texts[-CONTEXT_TAIL:]
    cells = ['<span class="sv-ellipsis">…</span>'] if len(texts) > len(tail) else []
    return cells + [token_box(t, "prefix", far=i < len(tail) - PROJECTOR_TAIL) for i, t in enumerate(tail)]


def _candidates(pos: DraftPosition, shown: int) -> str:
    top = pos.candidates or pos.target_top
    lines = []
    for token_id, text, prob in list(zip(top.ids, top.texts, top.probs))[:shown]:
        label = html.escape(display_text(text))
        lines.append(f"<b>{label}</b> {prob:.2f}" if token_id == pos.token_id else f"{label} {prob:.2f}")
    return f'<div class="sv-cand">{"<br>".join(lines)}</div>'


def _verify_column(above: str, mark: str, box: str, below: str = "") -> str:
    """One Verify-row column: correction slot, check/cross, the token, the target's candidates."""
    return (
        f'<div class="sv-col"><div class="sv-above">{above}</div>'
        f'<span class="sv-mark">{mark or "&nbsp;"}</span>{box}{below}</div>'
    )


def _verify_cell(pos: DraftPosition, rnd: Round, shown: int) -> str:
    above = ""
    if pos.status == REJECTED and rnd.correction:
        above = token_box(rnd.correction.text, "correction", title=f"correction: {rnd.correction.text!r}")
    style = {ACCEPTED: "accepted", REJECTED: "rejected"}.get(pos.status, "not_verified")
    mark = {ACCEPTED: ("✓", "#2e7d32"), REJECTED: ("✗", "#c62828")}.get(pos.status, ("✗", "#9e9e9e"))
    title = f"p={pos.p:.3f} q={pos.q:.3f} accept={pos.accept_prob:.3f}" + (
        f" u={pos.uniform:.3f}" if pos.uniform is not None else ""
    )
    box = token_box(pos.text, style, struck=pos.status != ACCEPTED, title=title)
    return _verify_column(above, f'<span style="color:{mark[1]}">{mark[0]}</span>', box, _candidates(pos, shown))


def draft_stop_note(rnd: Round) -> list[str]:
    """Why a round drafted fewer than γ tokens, where the draft's exit stopped it (:class:`~specviz.drafters.base.
    ConfidenceExit`): its last token's top draft probability under the threshold in force. Empty otherwise."""
    if rnd.exit_threshold is None or not rnd.draft:
        return []
    confidence = rnd.draft[-1].draft_top.probs[0]
    if confidence >= rnd.exit_threshold:
        return []
    return [
        f'<span class="sv-note">drafting stopped: the draft is unsure here (max q = {confidence:.2f}, below the '
        f"exit's {rnd.exit_threshold:.2f})</span>"
    ]


def _emitted_cells(rnd: Round) -> list[str]:
    cells = [token_box(p.text, "accepted") for p in rnd.draft if p.accepted]
    if rnd.correction:
        cells.append(token_box(rnd.correction.text, "correction", title="correction"))
    if rnd.bonus:
        cells.append(token_box(rnd.bonus.text, "bonus", title="bonus token"))
    return cells


def round_rows_html(trace: Trace, rnd: Round) -> str:
    """The six rows of one round (the draft-then-verify round of SpecDec, Xia et al. 2023, one row per stage) as an
    HTML block."""
    gamma = trace.config.gamma
    rule = rule_entry(trace.config.rule)
    shown = rule.candidates_shown(trace.config)
    tail = _prefix_tail(trace, rnd)
    prompt = trace.prompt_text if trace.prompt_text is not None else "".join(trace.prompt_tokens)
    verify_label = rule.verify_label.format(**trace.config.flat())
    verify = [_verify_column("", "", cell) for cell in tail] + [_verify_cell(p, rnd, shown) for p in rnd.draft]
    if rnd.bonus:
        verify.append(
            _verify_column(
                "", '<span style="color:#0d47a1">+</span>', token_box(rnd.bonus.text, "bonus", title="bonus token")
            )
        )
    slots = drafter_entry(trace.config.drafter).mask_slots
    assert trace.stats is not None, "a decoded trace carries its stats"
    ended = rnd.index == len(trace.rounds) - 1 and trace.stats.stop_reason == "eos"
    rows = [
        row_html("Prompt", [f'<div class="sv-prompt">{html.escape(prompt[-600:])}</div>']),
        row_html("Decoder input", tail + (_masks(len(rnd.draft)) if slots else [NO_SLOTS])),
        row_html(
            "Draft", tail + [token_box(p.text, "draft", title=f"q={p.q:.3f}") for p in rnd.draft] + draft_stop_note(rnd)
        ),
        row_html(verify_label, verify, "sv-verify"),
        row_html("Output", tail + _emitted_cells(rnd)),
        row_html("Next input", tail + _emitted_cells(rnd) + ([ENDED] if ended else _masks(gamma) if slots else [])),
    ]
    return f'<div class="sv-rows">{"".join(rows)}</div>'


def drafted_from_html(trace: Trace, rnd: Round) -> str:
    """What the round drafted from, for drafters that draft from the target's states (their registry entry's
    ``drafts_from``); empty for the others. Their first round drafts nothing: the target has no states yet. A drafter
    with a ``note`` says it above its first round."""
    entry = drafter_entry(trace.config.drafter)
    if entry.note and not rnd.index:
        return f'<p class="sv-origin">{html.escape(entry.note)}</p>'
    note = entry.drafts_from
    if not note:
        return ""
    if not rnd.drafted_count:
        text = (
            "Nothing drafted this round: the drafter reads the target's states, which exist only after the "
            "target's first pass (this one, over the prompt)."
        )
    else:
        texts = trace.prompt_tokens + [t for earlier in trace.rounds[: rnd.index] for t in earlier.emitted_texts]
        position = rnd.prefix_len - 2
        text = note.format(position=position, token=f"«{texts[position]}»", pending=f"«{texts[position + 1]}»")
    return f'<p class="sv-origin">{html.escape(text)}</p>'


def legend_html(rule: RuleEntry) -> str:
    """The boxes' colours, naming the correction and the bonus as ``rule`` makes them."""
    items = [
        ("accepted draft ✓", "accepted"),
        ("rejected draft ✗", "rejected"),
        (rule.correction, "correction"),
        (rule.bonus, "bonus"),
        ("drafted", "draft"),
        ("not verified", "not_verified"),
        ("[MASK] slot", "mask"),
    ]
    boxes = [token_box(label, style, mask=style == "mask") for label, style in items]
    return f'<div class="sv-legend">{"".join(boxes)}</div>'


def output_html(trace: Trace) -> str:
    """The whole output, each token coloured by how it was produced and underlined per round."""
    spans = []
    for round_number, text, kind in emitted_tokens(trace):
        fg, bg = COLORS[KIND_STYLE[kind]]
        spans.append(
            f'<span class="sv-r{round_number % 2}" style="background:{bg};color:{fg}" '
            f'title="round {round_number}: {kind}">{html.escape(text)}</span>'
        )
    return f'<div class="sv-out">{"".join(spans)}</div>'


def summary_line(trace: Trace) -> str:
    """The trace in one line (markdown bold on its counts): the round view's, and the exported lesson's header."""
    s = trace.stats
    assert s is not None, "a decoded trace has its stats"
    return (
        f"**{s.rounds}** rounds · **{s.new_tokens}** tokens · "
        f"**{s.accepted_tokens}/{s.drafted_tokens}** drafted tokens accepted · "
        f"**{s.mean_tokens_per_round:.2f}** tokens per round · **{s.target_forward_passes}** target passes "
        f"vs **{s.autoregressive_forward_passes}** autoregressive · stopped by {s.stop_reason.replace('_', ' ')} · "
        f"{trace.models['device']} · target in {trace.models['dtype']}"
        + (f" · draft in {trace.models['draft_dtype']}" if "draft_dtype" in trace.models else "")
        + (
            ""
            if rule_entry(trace.config.rule).lossless
            else " · **lossy rule**: the output may differ from the target's own"
        )
    )
