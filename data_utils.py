"""Data pipeline: tokenizers, context batching, TFRecord io, datasets, downloads.

Public facade over the `pardata` package (see docs/interfaces.md, "Data").
Build a dataset with build_data.py or `build_dataset`, then read it with
`make_dataset`:

    meta, tokenizer = data_utils.load_built("data/wikitext2")
    for inputs, targets in data_utils.make_dataset("data/wikitext2", "train"):
        ...  # int32 [B, T] each, rows continue across batches

`read_stream(data_dir, split)` gives a split's whole id stream back (the
records row by row, then the ids after the last record, which the build
keeps in `{split}-tail.txt`), for evaluation over every transition.

`verify_built(data_dir, meta)` checks every shard's size and sha256 against
meta.json (run it before training so a damaged valid/test shard stops the run
before the first step).
"""

from pardata.build import (
                           DATASET_DEFAULTS,
                           DATASETS,
                           SPLITS,
                           BuildConfig,
                           build_dataset,
                           resolve_sources,
)
from pardata.downloads import SOURCES, DatasetSource, ensure_raw_files
from pardata.errors import DataError
from pardata.meta import verify_built
from pardata.records import (
                           FORMAT_VERSION,
                           batchify,
                           load_built,
                           load_meta,
                           load_tokenizer,
                           make_dataset,
                           read_stream,
                           replica_rows,
                           unigram_counts,
)
from pardata.text import SplitSource
from pardata.tokenizers import (
                           TOKENIZERS,
                           ByteTokenizer,
                           SentencePieceTokenizer,
                           Tokenizer,
                           WordTokenizer,
                           rank_by_frequency,
)

__all__ = [
    "DATASET_DEFAULTS", "DATASETS", "SPLITS", "BuildConfig", "build_dataset", "resolve_sources",
    "SOURCES", "DatasetSource", "ensure_raw_files", "DataError", "FORMAT_VERSION", "batchify",
    "load_built", "load_meta", "load_tokenizer", "make_dataset", "read_stream", "replica_rows",
    "unigram_counts", "verify_built", "SplitSource", "TOKENIZERS", "ByteTokenizer",
    "SentencePieceTokenizer", "Tokenizer", "WordTokenizer", "rank_by_frequency",
]
