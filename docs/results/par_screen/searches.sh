#!/usr/bin/env bash
# The searches of par_screen.md for the pipeline's seeds 1 and 2 with three searches each
# (pipeline seed p searches at seeds 3p, 3p+1, 3p+2; seed 0's are par_settle's): the
# pipeline's search stage, one core. Run from the project root after ./create_tfrecords.sh;
# CORE picks the core (default 1), SEEDS the searches.
set -euo pipefail
CORE="${CORE:-1}" SEEDS="${SEEDS:-3 4 5 6 7 8}" \
  exec docs/results/par_pipeline/search_stage.sh runs/par_screen search_s
