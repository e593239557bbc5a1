"""The Streamlit main script's code: page config, the sidebar shared by every page, navigation over the pages.

Two ways in, one code: ``streamlit run app.py`` in a checkout (its top-level ``app.py`` calls :func:`main`; Streamlit
reads the options in ``.streamlit/config.toml``), and ``specviz app`` from an installed wheel, which serves this file
as the main script and passes the same options (``streamlit.toml`` here is that file) as flags.
"""

import logging
import os

import streamlit as st

from specviz import ui


def main() -> None:
    if os.environ.get("SPECVIZ_LOG_LEVEL") and not logging.getLogger("specviz").handlers:
        # e.g. SPECVIZ_LOG_LEVEL=INFO logs every shared computation (benchmarks/bench_class.py counts them)
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
        logging.getLogger("specviz").addHandler(handler)
        logging.getLogger("specviz").setLevel(os.environ["SPECVIZ_LOG_LEVEL"].upper())
    with ui.scheduled_run():  # page runs build in turns, first contentful paints first (specviz.serving.scheduler)
        ui.let_the_classroom_run_first()  # a class waiting for one trace: it is computed before this run takes the CPU
        st.set_page_config(**ui.PAGE_CONFIG)
        navigation = ui.navigation()
        ui.open_lesson_view(navigation)
        ui.draw_shared_sidebar()  # the config now; the widgets after the page's first contentful paint
        navigation.run()


if __name__ == "__main__":  # streamlit runs its main script as __main__
    main()
