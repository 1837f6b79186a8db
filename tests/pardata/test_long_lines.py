"""Text with very long lines: bounded training pieces, builds with every tokenizer."""

import numpy as np
import pytest

import data_utils
from pardata.text import bounded_pieces
from pardata.tokenizers import SP_MAX_SENTENCE_BYTES

WORDS = ["ka", "rito", "mensa", "ñu", "дом", "水木", "é", "berant", "quis", "lo"]


def _line(num_words: int, seed: int = 0) -> str:
    rng = np.random.default_rng(seed)
    return " ".join(WORDS[i] for i in rng.integers(0, len(WORDS), num_words))


def test_bounded_pieces_cut_at_the_last_space_within_the_bound():
    line = _line(3000)
    pieces = list(bounded_pieces(line, 64))
    assert " ".join(pieces) == line
    sizes = [len(p.encode()) for p in pieces]
    assert max(sizes) <= 64 and min(sizes) > 0
    # Greedy: the next word would not have fitted after the space.
    for piece, following in zip(pieces, pieces[1:]):
        assert len(piece.encode()) + 1 + len(following.split(" ")[0].encode()) > 64


def test_bounded_pieces_never_cut_a_character():
    line = "ab" + "水" * 100 + "é" * 50 + " tail"  # 402 bytes without a space, then one
    pieces = list(bounded_pieces(line, 16))
    assert "".join(pieces).replace(" ", "") == line.replace(" ", "")
    assert all(0 < len(p.encode()) <= 16 for p in pieces)
    # Cut just before the character that would cross the bound (3-byte 水: 14 or 15).
    assert [len(p.encode()) for p in pieces[:3]] == [14, 15, 15]


def test_bounded_pieces_keep_short_lines_whole():
    assert list(bounded_pieces("", 8)) == []
    assert list(bounded_pieces("水水", 8)) == ["水水"]  # 6 bytes
    assert list(bounded_pieces("é" * 4, 8)) == ["é" * 4]  # exactly the bound
    assert list(bounded_pieces("abcd efgh", 8)) == ["abcd", "efgh"]
    with pytest.raises(ValueError, match="max_bytes"):
        list(bounded_pieces("abc", 3))


@pytest.mark.slow
@pytest.mark.parametrize("tokenizer", ["sentencepiece", "word", "byte"])
def test_single_line_text_builds(tmp_path, tokenizer):
    """A ~2.3 MB text on one line (with a 100 KB run without spaces), no newline at all.

    The sentencepiece trainer skips sentences longer than its maximum, so
    without pieces it would be left with nothing to learn from.
    """
    train = _line(300_000, seed=1)
    cut = len(train) // 2
    train = train[:cut] + " " + "水" * 40_000 + " " + train[cut:]
    assert len(train.encode()) > 20 * SP_MAX_SENTENCE_BYTES
    texts = {"train": train, "valid": _line(4000, seed=2), "test": _line(4000, seed=3)}
    files = {}
    for split, text in texts.items():
        (tmp_path / f"{split}.txt").write_text(text, encoding="utf-8")
        files[f"{split}_file"] = str(tmp_path / f"{split}.txt")
    options = dict(vocab_size=30) if tokenizer == "sentencepiece" else {}
    config = data_utils.BuildConfig.for_dataset(
        "text", output_dir=str(tmp_path / "out"), tokenizer=tokenizer, batch_size=8,
        eval_batch_size=2, seq_len=256, **files, **options)
    meta = data_utils.build_dataset(config)

    tok = data_utils.load_tokenizer(config.output_dir, meta)
    for split, text in texts.items():
        info = meta["splits"][split]
        assert info["lines"] == 1
        assert info["bytes"] == len(text.encode())
        assert info["words"] == len(text.split()) + 1  # one per line, as <eos>
        encoded = tok.encode_array(text)
        assert info["ids"] == len(encoded)
        # The stored stream is the whole line encoded at once, and it decodes back.
        stream = data_utils.read_stream(config.output_dir, split, meta)
        np.testing.assert_array_equal(stream, encoded)
        assert tok.decode(stream) == text
