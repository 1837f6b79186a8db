"""Benchmarks, run as modules from the project root: `python -m bench.<name> [flags]`.

bench/common.py holds what they share (timing rounds, paired ratios, machine
information, results JSON in bench/results/, Markdown tables); bench_train.py
also serves the experiments (experiments/) and the notebook as a library.
"""
