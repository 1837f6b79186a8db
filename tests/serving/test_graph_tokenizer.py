"""serving.graph_tokenizer: the tokenizers as TensorFlow ops give the Python tokenizers' ids
and texts (the reference), on awkward text: empty, line ends, whitespace runs, Unicode
whitespace, unknown words, emoji, random ids."""

import numpy as np
import pytest

CASES = ["", "\n", "a", "The game\n", "  The  game \t of\u3000the year \n\n x",
         "h\u00e9llo <unk> w\u00f6rld\r\nna\u00efve \U0001F680\n", "\n\nfoo", "A\u2028B\x1cC",
         "<eos> inside a line\n"]


@pytest.fixture(scope="module")
def text(wikitext2_root):
    return (wikitext2_root / "wikitext-2" / "wiki.valid.tokens").read_text(encoding="utf-8")[:30000]


def _tokenizers(text):
    from pardata import tokenizers as t

    train = text[:20000]
    word = t.WordTokenizer.train([train], max_vocab=300)
    sp = t.SentencePieceTokenizer.train(train.split("\n"), 300, symbols=("<unk>",))
    byte = t.ByteTokenizer(eos=True)
    for tok in (word, sp, byte):  # the frequency ranking the model's ids follow
        tok.set_order(t.rank_by_frequency(tok.encode_base(train), tok.base_vocab_size))
    return {
        "word": word,
        "sentencepiece": sp,
        "sentencepiece lowercase": t.SentencePieceTokenizer(sp.model_proto, lowercase=True,
                                                            order=sp.order),
        "sentencepiece without line ends": t.SentencePieceTokenizer(
            sp.model_proto, line_ends=False, order=sp.order),
        "byte with eos": byte,
        "byte": t.ByteTokenizer(eos=False),
    }


@pytest.mark.slow
def test_graph_tokenizers_match_the_python_ones(text, tmp_path):
    import tensorflow as tf

    from serving.graph_tokenizer import GraphTokenizer

    rng = np.random.default_rng(0)
    for name, tok in _tokenizers(text).items():
        assert not np.array_equal(tok.order, np.arange(tok.vocab_size)) or name == "byte"
        graph = GraphTokenizer(tok, str(tmp_path))
        encode = tf.function(graph.encode, input_signature=[tf.TensorSpec([], tf.string)])
        decode = tf.function(graph.decode, input_signature=[tf.TensorSpec([None], tf.int32)])
        for case in CASES + [text[20000:24000]]:
            ids = tok.encode(case)
            assert encode(tf.constant(case)).numpy().tolist() == ids, (name, case[:40])
            if ids:
                assert decode(tf.constant(ids, tf.int32)).numpy().decode() == tok.decode(ids), \
                    (name, case[:40])
        for _ in range(20):  # random ids: <eos> anywhere, invalid UTF-8 for bytes
            ids = rng.integers(0, tok.vocab_size, 25).tolist()
            assert decode(tf.constant(ids, tf.int32)).numpy().decode() == tok.decode(ids), name
