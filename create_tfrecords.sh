#!/usr/bin/env bash
# Get a dataset ready for training: use the raw files in DATA_DIR (when absent:
# from the official archive there, from the copy shipped in datasets/ for
# WikiText-2, or downloaded) and build TFRecords + meta.json.
#
#   ./create_tfrecords.sh [dataset] [build_data.py flags...]
#
#   dataset   wikitext2 (default) | wikitext2_raw | wikitext103 | wikitext103_raw
#             | enwik8 | text8 | text (--train_file=F: valid and test are split off
#             its end, --split_fraction; or --train_file, --valid_file and --test_file)
#   DATA_DIR  raw files (default: data/raw next to this script; WikiText-2 is
#             unpacked there from datasets/wikitext-2, no network needed); a
#             DATA_DIR you set must be an existing directory: missing raw files
#             are unpacked or downloaded into it
#   output    data/<dataset> next to this script, unless --output_dir is given
#
# Examples:
#   DATA_DIR=/path/with/wikitext-2 ./create_tfrecords.sh
#   ./create_tfrecords.sh enwik8 --shards=8
#   ./create_tfrecords.sh wikitext103 --tokenizer=sentencepiece --vocab_size=32000
# Running it again with the same settings is a no-op (every shard's sha256 is
# checked; a damaged build is reported, not rebuilt), even with another
# DATA_DIR; other settings, and rebuilding a damaged build, need --overwrite
# (or another --output_dir).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
DATASET=wikitext2
if [[ $# -gt 0 && "$1" != -* ]]; then
  DATASET="$1"
  shift
fi
if [[ -n "${DATA_DIR:-}" && ! -d "$DATA_DIR" ]]; then
  echo "error: DATA_DIR=$DATA_DIR is not an existing directory: create it first (mkdir -p" \
    "$DATA_DIR) to keep the raw files there, or leave DATA_DIR unset for data/raw" >&2
  exit 1
fi
DATA_DIR="${DATA_DIR:-$ROOT/data/raw}"
source "$ROOT/tools/require_python.sh"
require_python

args=(--dataset="$DATASET" --data_dir="$DATA_DIR")
output_given=0
for arg in "$@"; do
  case "$arg" in
    --output_dir|--output_dir=*) output_given=1 ;;
  esac
done
if [[ $output_given -eq 0 ]]; then
  args+=(--output_dir="$ROOT/data/$DATASET")
fi

exec "${PYTHON:-python3}" "$ROOT/build_data.py" "${args[@]}" "$@"
