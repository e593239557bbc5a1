"""A tree round as Recursive Speculative Decoding draws it (Jeon et al. 2024): the draft iterations, the tree
picture (SVG), the recursive
rejection walk and its output chain (Jeon et al. 2024). Pure functions from trace records to HTML/SVG."""

from __future__ import annotations

import html

from specviz.engine.trace import ACCEPTED, REJECTED, Round
from specviz.presentation.boxes import COLORS, display_text, row_html, token_box

ITERATION_BANDS = ["#fff8e1", "#e3f2fd", "#fbe9e7", "#e8f5e9", "#f3e5f5", "#e0f7fa", "#fffde7", "#efebe9"]
NODE_STYLE = {ACCEPTED: "accepted", REJECTED: "rejected"}


def tree_bands_html(rnd: Round) -> str:
    """One colour band per draft iteration: the tokens fed to the draft and the tokens it drew."""
    tree = rnd.tree
    assert tree is not None, "only a tree round is drawn as a tree"
    rows = []
    inputs = [0]
    for level, drafted in enumerate(tree.levels):
        feed = [token_box(tree.nodes[i].text, "prefix", title=f"node {i}") for i in inputs]
        drew = [
            token_box(
                tree.nodes[i].text, "draft", title=f"node {i}: q={tree.nodes[i].q:.3f}, parent {tree.nodes[i].parent}"
            )
            for i in drafted
        ]
        rows.append(
            f'<div class="sv-row" style="background:{ITERATION_BANDS[level % len(ITERATION_BANDS)]};'
            f'border-radius:8px;padding:4px 8px"><div class="sv-label">iteration {level + 1}</div>'
            f"{''.join(feed)}"
            f'<span class="sv-ellipsis">&nbsp;→ draft model →&nbsp;</span>{"".join(drew)}</div>'
        )
        inputs = drafted
    return f'<div class="sv-rows">{"".join(rows)}</div>'


def sources_html(rnd: Round) -> str:
    """One row per source of a tree that mixes them (the suffix drafter's: the prompt's suffix tree, the server's
    earlier answers, the draft model): the tokens each proposed, where each sits in the tree in its tooltip."""
    tree = rnd.tree
    assert tree is not None, "only a tree round is drawn as a tree"
    by_source: dict[str, list[str]] = {}
    for node in tree.nodes[1:]:
        title = f"node {node.index} at depth {node.depth}, after node {node.parent}: q = {node.q:.3f}"
        by_source.setdefault(node.source, []).append(token_box(node.text, "draft", title=title))
    rows = [row_html(f"from the {source}", boxes) for source, boxes in by_source.items()]
    return f'<div class="sv-rows">{"".join(rows)}</div>'


def mixes_sources(rnd: Round) -> bool:
    """Whether a tree round's nodes say where each came from (the suffix drafter's trees)."""
    return rnd.tree is not None and any(node.source for node in rnd.tree.nodes)


def rrs_flow_html(rnd: Round) -> str:
    """The recursive rejection walk: each sibling check with p_i, q_i, min(1, p_i/q_i), u and ✓/✗."""
    tree = rnd.tree
    assert tree is not None, "only a tree round is drawn as a tree"
    rows = []
    for pos, node in zip(rnd.draft, tree.check_nodes):
        parent = tree.nodes[tree.nodes[node].parent]
        style = NODE_STYLE.get(pos.status, "not_verified")
        mark = "✓" if pos.accepted else "✗"
        draw = f", u = {pos.uniform:.2f}" if pos.uniform is not None else ""
        numbers = f"p = {pos.p:.3f}, q = {pos.q:.3f}, accept = {pos.accept_prob:.2f}{draw}"
        if tree.nodes[node].source:
            numbers += f" · from the {tree.nodes[node].source}"
        rows.append(
            row_html(
                f"after '{display_text(parent.text)}'",
                [
                    token_box(pos.text, style, struck=not pos.accepted),
                    f'<span class="sv-mark" style="color:{COLORS[style][0]}">{mark}</span>',
                    f'<span class="sv-cand">{numbers}</span>',
                ],
            )
        )
    extra = rnd.correction or rnd.bonus
    if extra is not None:
        kind = "correction" if rnd.correction else "bonus"
        what = "from the last residual" if extra.source == "residual" else "from p"
        rows.append(
            row_html(kind, [token_box(extra.text, kind), f'<span class="sv-cand">{what}, prob {extra.prob:.3f}</span>'])
        )
    return f'<div class="sv-rows">{"".join(rows)}</div>'


LABEL_CHARS = 13  # a node's label, centred above it, stays inside its column (130 px at 13 px monospace)


def tree_svg(rnd: Round) -> str:
    """The whole draft tree as a standalone SVG picture (RSD's tree, Jeon et al. 2024): depth left to right, siblings in
    draw order top to bottom, the accepted path thick and green, rejected nodes red, unchecked grey, and the
    round's correction or bonus token after the path's end. Each label sits centred above its node, haloed in
    white where an edge passes, and cut to its column (the full text in the node's tooltip)."""
    tree, column, row_height = rnd.tree, 130, 34
    assert tree is not None, "only a tree round is drawn as a tree"
    by_depth: dict[int, list[int]] = {}
    for node in tree.nodes:
        by_depth.setdefault(node.depth, []).append(node.index)
    tallest = max(len(members) for members in by_depth.values())
    xy = {
        index: (20 + column * depth, row_height * (rank + 1 + (tallest - len(members)) / 2))
        for depth, members in by_depth.items()
        for rank, index in enumerate(members)
    }
    parts = []
    for node in tree.nodes[1:]:
        (x0, y0), (x1, y1) = xy[node.parent], xy[node.index]
        on_path = node.index in tree.path
        parts.append(
            f'<line x1="{x0 + 8}" y1="{y0}" x2="{x1 - 8}" y2="{y1}" '
            f'stroke="{COLORS["accepted"][0] if on_path else "#bdbdbd"}" '
            f'stroke-width="{4 if on_path else 1.5}"/>'
        )
    for node in tree.nodes:
        style = "prefix" if node.index == 0 else NODE_STYLE.get(node.status, "not_verified")
        x, y = xy[node.index]
        text = display_text(node.text)
        label = html.escape(text if len(text) <= LABEL_CHARS else text[: LABEL_CHARS - 1] + "…")
        parts.append(
            f'<circle cx="{x}" cy="{y}" r="7" fill="{COLORS[style][0]}">'
            f"<title>node {node.index} {html.escape(text)!r}: q = {node.q:.3f} ({node.status})"
            f"{' from the ' + node.source if node.source else ''}</title>"
            f'</circle><text x="{x}" y="{y - 11}" font-size="13" text-anchor="middle" stroke="white" '
            f'stroke-width="3" paint-order="stroke" font-family="ui-monospace, Menlo, monospace" '
            f'fill="{COLORS[style][0]}">{label}</text>'
        )
    extra = rnd.correction or rnd.bonus
    if extra is not None:
        kind = "correction" if rnd.correction else "bonus"
        x, y = xy[tree.path[-1] if tree.path else 0]
        parts.append(
            f'<line x1="{x + 8}" y1="{y}" x2="{x + column * 0.7 - 9}" y2="{y}" '
            f'stroke="{COLORS[kind][0]}" stroke-dasharray="4 3"/>'
            f'<rect x="{x + column * 0.7 - 8}" y="{y - 8}" width="16" height="16" fill="{COLORS[kind][0]}"/>'
            f'<text x="{x + column * 0.7 + 12}" y="{y + 5}" font-size="13" font-weight="bold" '
            f'font-family="ui-monospace, Menlo, monospace" fill="{COLORS[kind][0]}">'
            f"{html.escape(display_text(extra.text))} ({kind})</text>"
        )
    width = 20 + column * (max(by_depth) + 1) + 120
    height = row_height * (tallest + 1)
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="sv-tree" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="the draft tree of this round">'
        f'<rect width="100%" height="100%" fill="white"/>{"".join(parts)}</svg>'
    )


def output_chain_html(rnd: Round) -> str:
    """The root followed by the round's emitted tokens, as the tree's output column."""
    tree = rnd.tree
    assert tree is not None, "only a tree round is drawn as a tree"
    cells = [token_box(tree.nodes[0].text, "prefix", title="root: the last committed token")]
    for node in tree.path:
        cells += ['<span class="sv-ellipsis">→</span>', token_box(tree.nodes[node].text, "accepted")]
    extra = rnd.correction or rnd.bonus
    if extra is not None:
        cells += [
            '<span class="sv-ellipsis">→</span>',
            token_box(extra.text, "correction" if rnd.correction else "bonus"),
        ]
    return f'<div class="sv-rows">{row_html("Output", cells)}</div>'
