"""Tokenizers: word, sentencepiece and byte, with ids ranked by frequency.

Every tokenizer has *base* ids (its natural numbering: first occurrence for
words, the sentencepiece model's ids, byte values) and *ranked* ids, the ones
the rest of the project sees: id 0 is the most frequent token of the training
split, ties are broken by first occurrence in the training stream, and tokens
never seen in training go last in base order. The adaptive softmax relies on
this order (Grave et al. 2017). `order[i]` is the base id of ranked id i.
"""

import collections
import io
import os

import numpy as np
import sentencepiece as spm

from pardata.errors import DataError
from pardata.text import bounded_pieces

TOKENIZERS = ("word", "sentencepiece", "byte")
EOS = "<eos>"
UNK = "<unk>"
WORD_VOCAB_FILE = "tokenizer-word-vocab.txt"
SP_MODEL_FILE = "tokenizer-spm.model"
SP_ORDER_FILE = "tokenizer-spm-order.txt"
BYTE_ORDER_FILE = "tokenizer-byte-order.txt"
# Fixed seed so that building twice gives the same sentencepiece model.
SP_SEED = 1234
# The sentencepiece trainer skips sentences longer than this (its
# max_sentence_length, in bytes): longer lines are trained on in pieces.
SP_MAX_SENTENCE_BYTES = 1 << 16


def rank_by_frequency(base_ids: np.ndarray, base_vocab_size: int) -> np.ndarray:
    """The frequency order of a training stream.

    Args:
        base_ids: int array [L], the training split in base ids.
        base_vocab_size: number of base ids.

    Returns:
        int64 [V] `order`, order[i] = base id of ranked id i: descending
        count, ties by first occurrence, unseen ids last in base order.
    """
    counts = np.bincount(base_ids, minlength=base_vocab_size)
    first = np.arange(base_vocab_size, dtype=np.int64) + len(base_ids)
    seen = counts > 0
    remaining = int(seen.sum())
    found = np.zeros(base_vocab_size, dtype=bool)
    step = 1 << 20
    # Chunked so the sort is small; most tokens show up in the first chunks.
    for start in range(0, len(base_ids), step):
        if remaining == 0:
            break
        values, index = np.unique(base_ids[start:start + step], return_index=True)
        new = ~found[values]
        first[values[new]] = index[new] + start
        found[values[new]] = True
        remaining -= int(new.sum())
    return np.lexsort((first, -counts)).astype(np.int64)


class Tokenizer:
    """Base interface: text <-> ranked ids.

    Attributes:
        kind: one of TOKENIZERS.
        order: int64 [V], base id of every ranked id.
    """

    kind = ""

    def __init__(self, order: np.ndarray | None = None):
        self.set_order(np.arange(self.base_vocab_size) if order is None else order)

    def set_order(self, order: np.ndarray) -> None:
        """Installs the ranking (e.g. from rank_by_frequency)."""
        order = np.asarray(order, dtype=np.int64)
        if not np.array_equal(np.sort(order), np.arange(self.base_vocab_size)):
            raise DataError(f"{self.kind} tokenizer: the id order is not a permutation "
                            f"of {self.base_vocab_size} ids; rebuild the dataset")
        self.order = order
        self._rank = np.empty_like(order)
        self._rank[order] = np.arange(len(order))

    @property
    def base_vocab_size(self) -> int:
        raise NotImplementedError

    @property
    def vocab_size(self) -> int:
        return self.base_vocab_size

    @property
    def eos_id(self) -> int | None:
        base = self._base_eos()
        return None if base is None else int(self._rank[base])

    @property
    def line_ends(self) -> bool:
        """Whether the id stream marks line ends (an <eos>, or the newline byte)."""
        return True

    def reserved_ids(self) -> dict:
        """Special token name -> ranked id."""
        return {name: int(self._rank[base]) for name, base in self._reserved_base().items()}

    def unknown_ids(self) -> list[int]:
        """Sorted ranked ids that stand for an unknown word, which generation never
        draws unless asked (`samplers.mask`): the word tokenizer's <unk>; for
        sentencepiece its own unknown piece and WikiText's <unk> kept as one piece
        (`symbols`); none for bytes."""
        return sorted(int(self._rank[base]) for base in self._unknown_base())

    def _unknown_base(self) -> list[int]:
        return []

    def encode(self, text: str) -> list[int]:
        """Ranked ids of `text`: one <eos> per "\\n", none after a last open line
        (none at all for a sentencepiece tokenizer without line ends)."""
        return self.encode_array(text).tolist()

    def encode_array(self, text: str) -> np.ndarray:
        """Like encode, as an int32 array [L]."""
        return self.to_ranked(self.encode_base(text))

    def to_ranked(self, base_ids: np.ndarray) -> np.ndarray:
        """Ranked int32 ids [L] of base ids [L]."""
        return self._rank[base_ids].astype(np.int32)

    def decode(self, ids) -> str:
        """Text of ranked ids (inverse of encode up to whitespace)."""
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        if ids.size and (ids.min() < 0 or ids.max() >= self.vocab_size):
            raise ValueError(f"ids must be in [0, {self.vocab_size}), got {ids.min()}..{ids.max()}")
        return self._decode_base(self.order[ids])

    def id_to_token(self, i: int) -> str:
        return self._base_token(int(self.order[i]))

    def encode_base(self, text: str) -> np.ndarray:
        raise NotImplementedError

    def _decode_base(self, base_ids: np.ndarray) -> str:
        raise NotImplementedError

    def _base_token(self, base_id: int) -> str:
        raise NotImplementedError

    def _base_eos(self) -> int | None:
        raise NotImplementedError

    def _reserved_base(self) -> dict:
        raise NotImplementedError

    def save(self, directory: str) -> dict:
        """Writes the tokenizer files; returns meta["tokenizer"]."""
        raise NotImplementedError


def _split_lines(text: str) -> tuple[list[str], bool]:
    """Lines of text and whether the last one ends with a newline."""
    lines = text.split("\n")
    closed = lines[-1] == ""
    if closed:
        lines.pop()
    return lines, closed


class WordTokenizer(Tokenizer):
    """WikiText-style words: whitespace split, <eos> per line, <unk> for OOV.

    Args:
        words: base vocabulary, including EOS and UNK.
        lowercase: lowercase text before splitting.
        order: ranking (see module doc); None keeps `words` order.
    """

    kind = "word"

    def __init__(self, words: list[str], lowercase: bool = False, order=None):
        self.words = list(words)
        self.lowercase = lowercase
        self._index = {w: i for i, w in enumerate(self.words)}
        if len(self._index) != len(self.words) or EOS not in self._index or UNK not in self._index:
            raise DataError("word vocabulary must hold distinct words including "
                            f"{EOS} and {UNK}; rebuild the dataset")
        super().__init__(order)

    @classmethod
    def train(cls, texts, lowercase=False, min_count=1, max_vocab=0):
        """Builds the vocabulary from training text pieces.

        Args:
            texts: iterable of str pieces that end at line breaks.
            lowercase: lowercase first.
            min_count: words seen fewer times become <unk>.
            max_vocab: keep at most this many ids (0: no limit), including
                <eos> and <unk>; the rest become <unk>.

        Returns:
            A WordTokenizer with words in first-occurrence order.
        """
        counts = collections.Counter()
        for text in texts:
            if lowercase:
                text = text.lower()
            lines, closed = _split_lines(text)
            for k, line in enumerate(lines):
                counts.update(line.split())
                if closed or k < len(lines) - 1:
                    counts[EOS] += 1
        counts.pop(UNK, None)
        counts.pop(EOS, None)
        kept = [w for w, c in counts.items() if c >= min_count]
        if max_vocab:
            if max_vocab > len(kept) + 2:
                raise DataError(
                    f"--vocab_size={max_vocab} is larger than the {len(kept) + 2} "
                    "distinct words (with <eos>, <unk>) of the training split; lower "
                    "--vocab_size or use 0 for all words")
            if max_vocab < 2:
                raise DataError("--vocab_size must be 0 (all words) or at least 2")
            keep = sorted(range(len(kept)), key=lambda i: -counts[kept[i]])[:max_vocab - 2]
            kept = [kept[i] for i in sorted(keep)]
        return cls([EOS, UNK] + kept, lowercase=lowercase)

    @property
    def base_vocab_size(self) -> int:
        return len(self.words)

    def encode_base(self, text: str) -> np.ndarray:
        if self.lowercase:
            text = text.lower()
        get, unk, eos = self._index.get, self._index[UNK], self._index[EOS]
        lines, closed = _split_lines(text)
        out = []
        for line in lines:
            out.extend([get(w, unk) for w in line.split()])
            out.append(eos)
        if lines and not closed:
            out.pop()
        return np.array(out, dtype=np.int32)

    def _decode_base(self, base_ids):
        eos = self._index[EOS]
        lines, current = [], []
        for i in base_ids.tolist():
            if i == eos:
                lines.append(" ".join(current))
                current = []
            else:
                current.append(self.words[i])
        lines.append(" ".join(current))
        return "\n".join(lines)

    def _base_token(self, base_id):
        return self.words[base_id]

    def _base_eos(self):
        return self._index[EOS]

    def _reserved_base(self):
        return {EOS: self._index[EOS], UNK: self._index[UNK]}

    def _unknown_base(self):
        return [self._index[UNK]]

    def save(self, directory):
        with open(os.path.join(directory, WORD_VOCAB_FILE), "w", encoding="utf-8") as f:
            f.write("".join(self.words[i] + "\n" for i in self.order))
        return {"kind": self.kind, "files": [WORD_VOCAB_FILE], "lowercase": self.lowercase}

    @classmethod
    def load(cls, directory, info):
        path = os.path.join(directory, WORD_VOCAB_FILE)
        with open(path, encoding="utf-8") as f:
            words = f.read().split("\n")[:-1]
        return cls(words, lowercase=bool(info.get("lowercase", False)))


class SentencePieceTokenizer(Tokenizer):
    """Sentencepiece (Kudo & Richardson 2018) pieces per line, <eos> per line.

    With `line_ends=False` the lines' pieces are joined without <eos> (the id
    is still reserved): the token stream of the original PAR implementation,
    which tokenizes each line on its own and drops the line breaks.

    Whitespace runs are collapsed to one space before encoding, so decoding
    restores the text up to whitespace.

    Args:
        model_proto: serialized sentencepiece model.
        lowercase: lowercase text before encoding.
        order: ranking over the model's ids; None keeps the model's order.
    """

    kind = "sentencepiece"

    def __init__(self, model_proto: bytes, lowercase: bool = False, order=None,
                 line_ends: bool = True):
        self.model_proto = model_proto
        self.lowercase = lowercase
        self._line_ends = bool(line_ends)
        self._sp = spm.SentencePieceProcessor(model_proto=model_proto)
        if self._sp.eos_id() < 0:
            raise DataError(f"the sentencepiece model has no end-of-sentence piece; "
                            f"train it with eos_id >= 0 (e.g. eos_piece={EOS})")
        super().__init__(order)

    @property
    def line_ends(self) -> bool:
        return self._line_ends

    @classmethod
    def train(cls, lines, vocab_size, model_type="unigram", lowercase=False,
              symbols=(), max_sentences=1_000_000, line_ends=True):
        """Trains a model on training lines.

        Args:
            lines: iterable of str (lines without newline).
            vocab_size: number of pieces, including <unk> and <eos>.
            model_type: "unigram" or "bpe".
            lowercase: lowercase first.
            symbols: words that must stay one piece (e.g. WikiText's <unk>).
            max_sentences: sample at most this many lines (bounds memory);
                a line longer than SP_MAX_SENTENCE_BYTES counts as its pieces.
            line_ends: an <eos> after every line when encoding.

        Returns:
            A SentencePieceTokenizer in the model's order.
        """
        if model_type not in ("unigram", "bpe"):
            raise DataError(f"--sp_model_type must be unigram or bpe, got {model_type!r}")
        prepared = (" ".join((line.lower() if lowercase else line).split()) for line in lines)
        # The trainer would skip longer lines (a book on one line: all of it);
        # it learns from their pieces, and encoding still reads lines whole.
        sentences = (piece for line in prepared
                     for piece in bounded_pieces(line, SP_MAX_SENTENCE_BYTES))
        buf = io.BytesIO()
        spm.set_random_generator_seed(SP_SEED)
        unk = "<sp_unk>" if UNK in symbols else UNK
        try:
            spm.SentencePieceTrainer.train(
                sentence_iterator=sentences, model_writer=buf,
                vocab_size=vocab_size, model_type=model_type, character_coverage=1.0,
                unk_id=0, unk_piece=unk, eos_id=1, eos_piece=EOS, bos_id=-1, pad_id=-1,
                user_defined_symbols=["\u2581" + s for s in symbols],
                normalization_rule_name="identity", max_sentence_length=SP_MAX_SENTENCE_BYTES,
                input_sentence_size=max_sentences, shuffle_input_sentence=True,
                num_threads=os.cpu_count() or 1, minloglevel=2)
        except RuntimeError as e:
            if "Vocabulary size" in str(e):
                limit = str(e).split("<=")[-1].strip(" .")
                raise DataError(f"--vocab_size={vocab_size} is too large for the training "
                                f"split (sentencepiece can make at most {limit} pieces); "
                                "lower --vocab_size") from None
            raise DataError(f"sentencepiece training failed: {e}") from None
        return cls(buf.getvalue(), lowercase=lowercase, line_ends=line_ends)

    @classmethod
    def from_file(cls, path, lowercase=False, line_ends=True):
        """Loads an existing `.model` file (from --sp_model)."""
        try:
            with open(path, "rb") as f:
                proto = f.read()
            return cls(proto, lowercase=lowercase, line_ends=line_ends)
        except OSError as e:
            raise DataError(f"cannot read sentencepiece model {path}: {e.strerror}; "
                            "check --sp_model") from None
        except RuntimeError:
            raise DataError(f"{path} is not a sentencepiece model; check --sp_model") from None

    @property
    def base_vocab_size(self) -> int:
        return self._sp.get_piece_size()

    def encode_base(self, text: str) -> np.ndarray:
        if self.lowercase:
            text = text.lower()
        lines, closed = _split_lines(text)
        pieces = self._sp.encode([" ".join(line.split()) for line in lines], out_type=int)
        if not self._line_ends:
            return np.array([i for p in pieces for i in p], dtype=np.int32)
        eos = self._sp.eos_id()
        out = []
        for p in pieces:
            out.extend(p)
            out.append(eos)
        if lines and not closed:
            out.pop()
        return np.array(out, dtype=np.int32)

    def _decode_base(self, base_ids):
        eos = self._sp.eos_id()
        ids = base_ids.tolist()
        lines, start = [], 0
        for k, i in enumerate(ids + [eos]):
            if i == eos:
                lines.append(self._sp.decode(ids[start:k]))
                start = k + 1
        return "\n".join(lines)

    def _base_token(self, base_id):
        return self._sp.id_to_piece(base_id)

    def _base_eos(self):
        return self._sp.eos_id()

    def _reserved_base(self):
        return {self._sp.id_to_piece(i): i for i in (self._sp.eos_id(), self._sp.unk_id())}

    def _unknown_base(self):
        # piece_to_id gives the unknown id for a piece the model lacks.
        kept = {self._sp.piece_to_id(piece) for piece in ("\u2581" + UNK, UNK)}
        return sorted(kept | {self._sp.unk_id()})

    def save(self, directory):
        with open(os.path.join(directory, SP_MODEL_FILE), "wb") as f:
            f.write(self.model_proto)
        np.savetxt(os.path.join(directory, SP_ORDER_FILE), self.order, fmt="%d")
        return {"kind": self.kind, "files": [SP_MODEL_FILE, SP_ORDER_FILE],
                "lowercase": self.lowercase, "line_ends": self._line_ends}

    @classmethod
    def load(cls, directory, info):
        tok = cls.from_file(os.path.join(directory, SP_MODEL_FILE),
                            lowercase=bool(info.get("lowercase", False)),
                            line_ends=bool(info.get("line_ends", True)))
        tok.set_order(_load_order(os.path.join(directory, SP_ORDER_FILE)))
        return tok


class ByteTokenizer(Tokenizer):
    """Raw bytes (enwik8/text8 style): 256 ids, plus <eos> replacing "\\n" if asked.

    Args:
        eos: map every newline byte to an <eos> id (vocabulary 257).
        order: ranking over base ids (byte values, 256 = <eos>).
    """

    kind = "byte"

    def __init__(self, eos: bool = False, order=None):
        self.eos = eos
        super().__init__(order)

    @property
    def base_vocab_size(self) -> int:
        return 257 if self.eos else 256

    def encode_base(self, text: str) -> np.ndarray:
        return self.encode_bytes_base(text.encode("utf-8"))

    def encode_bytes_base(self, data: bytes) -> np.ndarray:
        """Base ids of raw bytes (any bytes, not only UTF-8)."""
        ids = np.frombuffer(data, dtype=np.uint8).astype(np.int32)
        if self.eos:
            ids[ids == 10] = 256
        return ids

    def encode_bytes(self, data: bytes) -> np.ndarray:
        """Ranked int32 ids [L] of raw bytes."""
        return self.to_ranked(self.encode_bytes_base(data))

    def decode_bytes(self, ids) -> bytes:
        base = self.order[np.asarray(ids, dtype=np.int64).reshape(-1)]
        return np.where(base == 256, 10, base).astype(np.uint8).tobytes()

    def _decode_base(self, base_ids):
        return np.where(base_ids == 256, 10, base_ids).astype(np.uint8).tobytes().decode(
            "utf-8", errors="replace")

    def _base_token(self, base_id):
        if base_id == 256:
            return EOS
        return chr(base_id) if 33 <= base_id <= 126 else f"<0x{base_id:02X}>"

    def _base_eos(self):
        return 256 if self.eos else None

    def _reserved_base(self):
        return {EOS: 256} if self.eos else {}

    def save(self, directory):
        np.savetxt(os.path.join(directory, BYTE_ORDER_FILE), self.order, fmt="%d")
        return {"kind": self.kind, "files": [BYTE_ORDER_FILE], "eos": self.eos}

    @classmethod
    def load(cls, directory, info):
        return cls(eos=bool(info.get("eos", False)),
                   order=_load_order(os.path.join(directory, BYTE_ORDER_FILE)))


def _load_order(path: str) -> np.ndarray:
    try:
        return np.atleast_1d(np.loadtxt(path, dtype=np.int64))
    except (OSError, ValueError) as e:
        raise DataError(f"cannot read tokenizer file {path} ({e}); rebuild the dataset "
                        "with build_data.py --overwrite") from None


_CLASSES = {"word": WordTokenizer, "sentencepiece": SentencePieceTokenizer,
            "byte": ByteTokenizer}


def load_tokenizer_files(directory: str, info: dict) -> Tokenizer:
    """Loads a tokenizer saved by Tokenizer.save; `info` is meta["tokenizer"]."""
    kind = info.get("kind")
    if kind not in _CLASSES:
        raise DataError(f"{directory}/meta.json: unknown tokenizer kind {kind!r}; "
                        f"expected one of {TOKENIZERS}")
    for name in info.get("files", []):
        if not os.path.isfile(os.path.join(directory, name)):
            raise DataError(f"tokenizer file {os.path.join(directory, name)} is missing; "
                            "rebuild the dataset with build_data.py --overwrite")
    return _CLASSES[kind].load(directory, info)
