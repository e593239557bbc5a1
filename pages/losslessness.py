"""Losslessness lab: runs specviz/ui/pages/losslessness.py, the page's code."""

from specviz.ui.navigation import run_page

run_page(__file__)
