"""Your engine's numbers: what vLLM, SGLang or llama.cpp reported about a speculative run, pasted or uploaded, read
into one shape and explained against the theory this app teaches (specviz.server_reports.reading, engine_explain)."""

import streamlit as st

from specviz import ui
from specviz.server_reports.explain import explain
from specviz.settings import ConfigError
from specviz.ui import engine_numbers

config, prompt, defaults = ui.shared_controls()
st.title("Your engine's numbers")
st.caption(
    "Paste or upload what your serving engine reported about a speculative run: vLLM's `/metrics` "
    "(`vllm:spec_decode_...`), its `SpecDecoding metrics:` log line or a response's per-request metrics (summary or "
    "detailed, per step); SGLang's `Decode batch` line, `sglang:spec_accept_...` gauges or a `/generate` answer's "
    "`meta_info`; llama.cpp's server log, its `/metrics` (`llamacpp:spec_decode_...`) or a response's `timings` "
    "(`draft_n`, `draft_n_accepted`). The page reads the counts, finds α behind them, draws the acceptance at each "
    "draft position against the i.i.d. theory α^i and says what this α buys at your draft's cost c and your target's "
    "pass cost v(k). The Round view and the Race download their own runs in vLLM's names: they read back here."
)
text, engine = engine_numbers.engine_text()
if text is None:
    st.info("Nothing read yet: paste an engine's output above (Ctrl+Enter) or upload its file.")
else:
    report = engine_numbers.read_report(text, engine)
    if report is not None:
        engine_numbers.show_what_was_read(report)
        st.subheader("What it means")
        costs = engine_numbers.costs(report, config)
        try:
            explained = explain(report, costs.c, costs.gammas, costs.verify_costs, costs.draft_length)
        except ConfigError as exc:  # a cost the widgets let through and the theory refuses: said, not raised
            st.error(str(exc))
        else:
            engine_numbers.show_explanation(explained)
