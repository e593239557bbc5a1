"""Metrics and theory: runs specviz/ui/pages/metrics.py, the page's code."""

from specviz.ui.navigation import run_page

run_page(__file__)
