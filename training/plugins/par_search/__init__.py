"""The PAR architecture search as a training plug-in, with everything it owns.

    config.py   SearchConfig: its section of the training config (flags
                --tau_start, --arch_*, --search_cost_*, --freeze_*,
                --then_retrain) and the migration of older config.json files
    plugin.py   ParSearch: architecture optimizer, temperature, cost term,
                progressive freezing, summaries, derivation at the end
    derive.py   the derived architecture: report, architecture.json/.txt,
                reading --architecture
    plots.py    the probability history (arch_history.json) and its plots

Importing this package does not load TensorFlow (plugin.py does).
"""
