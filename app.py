"""specviz: the Streamlit entry point: page config, the sidebar shared by every page, navigation."""

import logging
import os

import streamlit as st

from specviz import ui

if os.environ.get("SPECVIZ_LOG_LEVEL") and not logging.getLogger("specviz").handlers:
    # e.g. SPECVIZ_LOG_LEVEL=INFO logs every shared computation (benchmarks/bench_class.py counts them)
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    logging.getLogger("specviz").addHandler(handler)
    logging.getLogger("specviz").setLevel(os.environ["SPECVIZ_LOG_LEVEL"].upper())
st.set_page_config(**ui.PAGE_CONFIG)
navigation = st.navigation([
    st.Page("pages/round_view.py", title="Round view", icon="🔎", default=True),
    st.Page("pages/lesson_player.py", title="Lesson player", icon="🎓"),
    st.Page("pages/metrics.py", title="Metrics and theory", icon="📈"),
    st.Page("pages/gamma_sweep.py", title="Gamma sweep", icon="🎚️"),
    st.Page("pages/compare_rules.py", title="Compare rules", icon="⚖️"),
    st.Page("pages/losslessness.py", title="Losslessness lab", icon="🎲"),
    st.Page("pages/numerics.py", title="Precision and rounding", icon="🔢"),
    st.Page("pages/parallel.py", title="Parallel verification", icon="⏱️"),
    st.Page("pages/recursive.py", title="Recursive (tree) drafts", icon="🌳"),
    st.Page("pages/parallel_drafters.py", title="Parallel drafters", icon="🧩"),
])
ui.draw_shared_sidebar()
navigation.run()
