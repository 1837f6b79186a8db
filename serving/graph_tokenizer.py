"""The project's tokenizers as TensorFlow ops, for a SavedModel that takes strings.

`GraphTokenizer(tokenizer)` is a `tf.Module` whose `encode(text)` and
`decode(ids)` give, in a graph, the ranked ids of `pardata.tokenizers`
(`Tokenizer.encode` / `Tokenizer.decode`):

- word: lines split at "\\n", words at whitespace runs, looked up in a
  table read from the ranked word list (a SavedModel asset file); unknown
  words map to <unk>, one <eos> per line;
- sentencepiece: each line with its whitespace runs collapsed to one space
  and cut by `tensorflow_text.SentencepieceTokenizer` (the same model proto,
  kept in the graph), one <eos> per line (none for a `--nosp_eos` build);
- byte: the UTF-8 bytes, the newline byte as <eos> for `--byte_eos`.

then mapped from the tokenizer's own (base) ids to the model's ranked ids by
the tokenizer's order (rank tables kept in the graph). Whitespace is what
Python's `str.split()` splits on (the same 29 code points); lowercasing (a
`--lowercase` build) is `tf.strings.lower(encoding="utf-8")`, Unicode simple
case mapping, which can differ from Python's `str.lower()` on a few
context-dependent characters. Decoding bytes replaces invalid UTF-8 with
U+FFFD as Python's `errors="replace"` does (ICU's count of replacement
characters for a broken sequence may differ).

A SavedModel holding a sentencepiece tokenizer needs `import
tensorflow_text` before `tf.saved_model.load` (it registers the op).
"""

import os

import numpy as np
import tensorflow as tf

from pardata import tokenizers

# The characters Python's str.split() treats as whitespace, as an RE2 class.
_WHITESPACE = "[" + "".join(f"\\x{{{c:x}}}" for c in range(0x110000)
                            if chr(c).isspace()) + "]+"


def _lines(text, lowercase):
    """(lines [n] without their "\\n", whether the text ended with "\\n"), of a scalar string."""
    if lowercase:
        text = tf.strings.lower(text, encoding="utf-8")
    lines = tf.strings.split(text, "\n")  # [n + closed]: "a\nb\n" -> ["a", "b", ""]
    closed = tf.equal(lines[-1], "")
    lines = tf.cond(closed, lambda: lines[:-1], lambda: lines)
    return lines, closed


def _collapse(lines):
    """Each line's whitespace runs as one space, no space at either end (" ".join(l.split()))."""
    return tf.strings.regex_replace(tf.strings.regex_replace(lines, _WHITESPACE, " "),
                                    "^ | $", "")


def _with_line_ends(pieces, eos, closed):
    """Flat ids of ragged [n, None] `pieces` with `eos` after each line, none after an open
    last one."""
    rows = pieces.nrows()
    ends = tf.RaggedTensor.from_tensor(tf.fill(tf.stack([rows, 1]), eos))
    flat = tf.concat([pieces, ends], axis=1).flat_values
    drop = tf.logical_and(rows > 0, tf.logical_not(closed))
    return tf.cond(drop, lambda: flat[:-1], lambda: flat)


def _split_at(ids, is_end):
    """Ragged [lines, None] of `ids` [L] cut at the positions where `is_end` (dropped)."""
    line = tf.cumsum(tf.cast(is_end, tf.int64), exclusive=True)
    keep = tf.logical_not(is_end)
    return tf.RaggedTensor.from_value_rowids(
        tf.boolean_mask(ids, keep), tf.boolean_mask(line, keep),
        nrows=tf.reduce_sum(tf.cast(is_end, tf.int64)) + 1)


class GraphTokenizer(tf.Module):
    """Text <-> ranked ids in TensorFlow ops (see the module docstring).

    Args:
        tokenizer: a `pardata.tokenizers.Tokenizer` (word, sentencepiece, byte).
        asset_dir: an existing directory for the word list (word tokenizer);
            the SavedModel copies it into its assets.
    """

    def __init__(self, tokenizer, asset_dir):
        super().__init__(name="tokenizer")
        self.kind = tokenizer.kind
        self._line_ends = bool(tokenizer.line_ends)
        self._lowercase = bool(getattr(tokenizer, "lowercase", False))
        # base id -> ranked id, ranked id -> base id.
        self._rank = tf.constant(tokenizer.to_ranked(np.arange(tokenizer.base_vocab_size)),
                                 tf.int32)
        self._order = tf.constant(tokenizer.order, tf.int32)
        self._eos = -1 if tokenizer.eos_id is None else int(tokenizer.eos_id)  # ranked
        if self.kind == "word":
            path = os.path.join(asset_dir, tokenizers.WORD_VOCAB_FILE)
            tokenizer.save(asset_dir)  # the words in ranked order, one per line
            self._vocab_file = tf.saved_model.Asset(path)
            unk = int(tokenizer.reserved_ids()[tokenizers.UNK])
            self._ids = tf.lookup.StaticHashTable(tf.lookup.TextFileInitializer(
                self._vocab_file, tf.string, tf.lookup.TextFileIndex.WHOLE_LINE,
                tf.int64, tf.lookup.TextFileIndex.LINE_NUMBER), unk)
            self._words = tf.lookup.StaticHashTable(tf.lookup.TextFileInitializer(
                self._vocab_file, tf.int64, tf.lookup.TextFileIndex.LINE_NUMBER,
                tf.string, tf.lookup.TextFileIndex.WHOLE_LINE), "")
        elif self.kind == "sentencepiece":
            import tensorflow_text

            self._sp = tensorflow_text.SentencepieceTokenizer(
                model=tokenizer.model_proto, out_type=tf.int32)
            self._sp_eos = int(tokenizer._sp.eos_id())  # base
        elif self.kind == "byte":
            self._byte_eos = bool(tokenizer.eos)
            self._bytes = tf.constant([bytes([b]) for b in range(256)])
        else:
            raise ValueError(f"no graph tokenizer for kind {self.kind!r}")

    def encode(self, text):
        """Ranked int32 ids [L] of a scalar UTF-8 string (`Tokenizer.encode`)."""
        text = tf.convert_to_tensor(text, tf.string)
        if self.kind == "byte":
            base = tf.cast(tf.io.decode_raw(text, tf.uint8), tf.int32)  # [L]
            if self._byte_eos:
                base = tf.where(tf.equal(base, 10), 256, base)
            return tf.gather(self._rank, base)
        lines, closed = _lines(text, self._lowercase)
        cleaned = _collapse(lines)
        if self.kind == "word":
            words = tf.strings.split(cleaned)  # ragged [n, None]
            ids = tf.cast(tf.ragged.map_flat_values(self._ids.lookup, words), tf.int32)
            return _with_line_ends(ids, self._eos, closed)
        pieces = self._sp.tokenize(cleaned)  # ragged [n, None] base ids
        base = (_with_line_ends(pieces, self._sp_eos, closed) if self._line_ends
                else pieces.flat_values)
        return tf.gather(self._rank, base)

    def decode(self, ids):
        """The scalar string of ranked int ids [L] (`Tokenizer.decode`)."""
        ids = tf.cast(tf.reshape(ids, [-1]), tf.int32)
        if self.kind == "byte":
            base = tf.gather(self._order, ids)
            base = tf.where(tf.equal(base, 256), 10, base)
            raw = tf.strings.reduce_join(tf.gather(self._bytes, base))
            return tf.strings.unicode_transcode(raw, "UTF-8", "UTF-8", errors="replace",
                                                replacement_char=0xFFFD)
        if self.kind == "word":
            lines = _split_at(ids, tf.equal(ids, self._eos))
            words = tf.ragged.map_flat_values(
                lambda i: self._words.lookup(tf.cast(i, tf.int64)), lines)
            return tf.strings.reduce_join(tf.strings.reduce_join(words, axis=1, separator=" "),
                                          separator="\n")
        base = tf.gather(self._order, ids)
        lines = _split_at(base, tf.equal(base, self._sp_eos))
        return tf.strings.reduce_join(self._sp.detokenize(lines), separator="\n")
