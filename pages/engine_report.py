"""Your engine's numbers: runs specviz/ui/pages/engine_report.py, the page's code."""

from specviz.ui.navigation import run_page

run_page(__file__)
