"""Experiment drivers (training runs, sweeps, commit comparisons), run as modules from the
project root: `python -m experiments.<name> [flags]`. Their results go to bench/results/.
"""
