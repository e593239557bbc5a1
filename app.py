"""specviz: the Streamlit entry point: page config, the sidebar shared by every page, navigation."""

import streamlit as st

from specviz import ui

st.set_page_config(page_title="specviz: speculative decoding, seen", page_icon="✓", layout="wide")
navigation = st.navigation([
    st.Page("pages/round_view.py", title="Round view", icon="🔎", default=True),
    st.Page("pages/metrics.py", title="Metrics and theory", icon="📈"),
    st.Page("pages/gamma_sweep.py", title="Gamma sweep", icon="🎚️"),
    st.Page("pages/compare_rules.py", title="Compare rules", icon="⚖️"),
    st.Page("pages/losslessness.py", title="Losslessness lab", icon="🎲"),
    st.Page("pages/parallel.py", title="Parallel verification", icon="⏱️"),
])
defaults = ui.app_defaults()
config, prompt = ui.sidebar_controls(defaults)
st.session_state.update(sv_config=config, sv_prompt=prompt, sv_defaults=defaults)
navigation.run()
