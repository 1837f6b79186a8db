#!/usr/bin/env bash
# The three short WikiText-2 searches of par_settle.md: the pipeline's search stage
# (./base_model.sh --pipeline's flags without --then_retrain), seeds 0-2, one core.
# Run from the project root after ./create_tfrecords.sh.
set -euo pipefail
CORE=0 SEEDS="0 1 2" docs/results/par_pipeline/search_stage.sh runs/settle_wt2 s
python -m experiments.settle --runs=runs/settle_wt2/s0,runs/settle_wt2/s1,runs/settle_wt2/s2 \
  --extra=afafaf,aaafff --out=runs/settle_wt2/settle.json
