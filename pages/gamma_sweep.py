"""Gamma sweep: runs specviz/ui/pages/gamma_sweep.py, the page's code."""

from specviz.ui.navigation import run_page

run_page(__file__)
