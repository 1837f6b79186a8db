"""What a model's perplexity should be compared with: the data's own yardsticks.

A perplexity means little alone on a text of one's own (is 700 good?). Two
baselines that need no training say where a model stands:

    uniform   every id equally likely: perplexity = vocab_size.
    unigram   each id with its training frequency, add-one smoothed
              (p(w) = (c_w + 1) / (N + V)), no context at all.

A language model that is not below the unigram perplexity has learned no more
than how often each token occurs.
"""

import numpy as np

from pardata.meta import load_meta
from pardata.records import read_stream, unigram_counts


def unigram_perplexity(data_dir: str, split: str = "valid", meta: dict | None = None) -> float:
    """Perplexity of `split`'s ids (all but the first, which no model predicts) under the
    add-one smoothed unigram distribution of the training counts."""
    meta = load_meta(data_dir) if meta is None else meta
    counts = unigram_counts(data_dir, meta).astype(np.float64)
    log_p = np.log(counts + 1.0) - np.log(counts.sum() + counts.size)
    ids = read_stream(data_dir, split, meta, verify=False)[1:]
    return float(np.exp(-log_p[ids].mean()))


def yardsticks(data_dir: str, split: str = "valid", meta: dict | None = None) -> dict:
    """{"unigram": perplexity, "uniform": perplexity} of `split` (see the module doc)."""
    meta = load_meta(data_dir) if meta is None else meta
    return {"unigram": unigram_perplexity(data_dir, split, meta),
            "uniform": float(meta["vocab_size"])}
