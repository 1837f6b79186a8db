"""The run store: a run directory as one concept that training and serving share.

Modules (import what you need; importing `runstore` loads nothing):
    run_dir      the run directory's file names and layout; atomic writes and
                 the sweep of temporaries (no TensorFlow).
    run_lock     the lock a trainer holds on its run directory.
    errors       ConfigError, the user-fixable error of flags, data and runs.
    checkpoints  finding, verifying, repairing checkpoints; the model-only restore.
    config       RunConfig: what loading a model needs of config.json (no training/).
    metrics      perplexity, word perplexity, bits per byte (the figures a run reports).

`training/` writes runs through it, `serving/` reads them through it; the run
store imports neither (tests/test_import_graph.py).
"""
