"""specviz: the Streamlit entry point (page config and navigation)."""

import streamlit as st

st.set_page_config(page_title="specviz: speculative decoding, seen", page_icon="✓", layout="wide")
navigation = st.navigation([
    st.Page("pages/round_view.py", title="Round view", icon="🔎", default=True),
])
navigation.run()
