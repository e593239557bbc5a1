"""Precision and rounding: runs specviz/ui/pages/numerics.py, the page's code."""

from specviz.ui.navigation import run_page

run_page(__file__)
