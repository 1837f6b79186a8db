"""serving.generation: cached generation against from-scratch references, sampling, runs.

The references run the model eagerly without the decoder: a full
recomputation over the whole context with no memory, and an explicit
Transformer-XL segment recurrence that keeps every block input and slices
the memory by hand.
"""

import logging
import os
from pathlib import Path
import shutil

import numpy as np
import pytest

from tests.helpers.runs import BEST_STEP, LATEST_STEP, PROMPT, build_data, make_model, make_run


def full_log_probs(model, context):
    """Next-token log-probs after `context`, recomputed from scratch with no memory: [V]."""
    hidden, _ = model(np.asarray(context, np.int32)[None], None, training=False)
    return model.log_probs(hidden)[0, -1].numpy()


def greedy_full_recomputation(model, prompt, num_tokens):
    """Greedy tokens and their distributions, re-running the whole context at each step."""
    context, tokens, dists = list(prompt), [], []
    for _ in range(num_tokens):
        log_probs = full_log_probs(model, context)
        tokens.append(int(np.argmax(log_probs)))
        dists.append(log_probs)
        context.append(tokens[-1])
    return tokens, np.stack(dists)


def greedy_segment_recurrence(model, prompt, num_tokens, mem_len, chunk_len):
    """Transformer-XL segment recurrence written out: every block input is kept.

    Segments are the prompt in chunks of `chunk_len`, then one token each.
    Each segment sees, per memory-carrying block, the last `mem_len` block
    inputs of the earlier positions; the model is asked to keep everything
    (huge mem_len) so the block inputs can be read off its new memories.
    """
    history = [np.zeros((1, 0, model.d_model), np.float32) for _ in range(model.num_mems)]

    def run(segment):
        mems = [h[:, h.shape[1] - min(mem_len, h.shape[1]):] for h in history]
        hidden, new_mems = model(np.asarray(segment, np.int32)[None], mems, training=False,
                                 mem_len=10**9)
        for i, new in enumerate(new_mems):
            history[i] = np.concatenate([history[i], new.numpy()[:, -len(segment):]], axis=1)
        return model.log_probs(hidden)[0, -1].numpy()

    for start in range(0, len(prompt), chunk_len):
        log_probs = run(prompt[start:start + chunk_len])
    tokens, dists = [], []
    for _ in range(num_tokens):
        tokens.append(int(np.argmax(log_probs)))
        dists.append(log_probs)
        log_probs = run([tokens[-1]])
    return tokens, np.stack(dists)




@pytest.fixture(scope="module")
def supernet():
    return make_model(seed=0)


@pytest.fixture(scope="module")
def decoder(supernet):
    from serving.generation import Decoder

    return Decoder(supernet, mem_len=4)


# -------------------------------------------------------- cache correctness


@pytest.mark.parametrize("variant", [
    dict(),                                          # supernet, argmax "afai"
    dict(eval_mode="expected"),                      # supernet mixing all candidates
    dict(architecture="afaf"),                       # fixed architecture
    dict(architecture="aafa", attention="adaptive_span", span_init=0.5, span_max=16,
         span_ramp=4),
])
@pytest.mark.slow
def test_cache_equals_full_recomputation_when_memory_holds_the_context(variant):
    from serving.generation import Decoder

    model = make_model(seed=3, **variant)
    num_tokens = 12
    decoder = Decoder(model, mem_len=len(PROMPT) + num_tokens)
    tokens, dists = decoder.generate(PROMPT, num_tokens, greedy=True, chunk_len=3,
                                     return_log_probs=True)
    ref_tokens, ref_dists = greedy_full_recomputation(model, PROMPT, num_tokens)
    assert tokens[0].tolist() == ref_tokens
    np.testing.assert_allclose(dists[0], ref_dists, atol=2e-5)
    assert len(set(ref_tokens)) > 1  # a sequence, not one repeated token


@pytest.mark.parametrize("preset", ["sha_rnn_tiny", "lstm_tiny"])
@pytest.mark.slow
def test_sha_rnn_cache_equals_full_recomputation(preset):
    """The same generic Decoder over SHA-RNN's state: LSTM (h, c) and attention memory."""
    from model.families import get_family
    from serving.generation import Decoder

    family = get_family("sha_rnn")
    model = family.build(family.preset_config(
        preset, vocab_size=64, dropout=0.0, dropout_input=0.0, dropout_hidden=0.0,
        attn_dropout=0.0))
    rng = np.random.default_rng(5)
    for v in model.variable_groups()["weights"]:
        if len(v.shape) >= 2:
            v.assign(rng.normal(0.0, 0.4, v.shape).astype(np.float32))
    num_tokens = 12
    decoder = Decoder(model, mem_len=len(PROMPT) + num_tokens)
    tokens, dists = decoder.generate(PROMPT, num_tokens, greedy=True, chunk_len=3,
                                     return_log_probs=True)
    ref_tokens, ref_dists = greedy_full_recomputation(model, PROMPT, num_tokens)
    assert tokens[0].tolist() == ref_tokens
    np.testing.assert_allclose(dists[0], ref_dists, atol=2e-5)
    assert len(set(ref_tokens)) > 1
    assert decoder.tracing_counts()["forward"] == 1


@pytest.mark.slow
def test_short_memory_equals_explicit_segment_recurrence(supernet, decoder):
    num_tokens = 10
    tokens, dists = decoder.generate(PROMPT, num_tokens, greedy=True, chunk_len=3,
                                     return_log_probs=True)
    ref_tokens, ref_dists = greedy_segment_recurrence(supernet, PROMPT, num_tokens, 4, 3)
    assert tokens[0].tolist() == ref_tokens
    np.testing.assert_allclose(dists[0], ref_dists, atol=2e-5)
    # The check discriminates: a whole-context recomputation gives other numbers.
    _, full = greedy_full_recomputation(supernet, PROMPT, num_tokens)
    assert np.abs(full - ref_dists).max() > 1e-2


def test_one_length_1_forward_per_token(supernet):
    """The compiled loop's forward passes, recorded as they run (a py_function in the graph)."""
    import tensorflow as tf

    from serving.generation import Decoder

    calls = []

    class Spy:
        def __init__(self, model):
            self.model = model

        def __getattr__(self, name):  # log_probs, initial_state, vocab_size
            return getattr(self.model, name)

        def __call__(self, ids, *args, **kwargs):
            def note(shape):
                calls.append(tuple(shape.numpy()))
                return shape

            record = tf.py_function(note, [tf.shape(ids)], tf.int32)
            with tf.control_dependencies([record]):
                ids = tf.identity(ids)
            return self.model(ids, *args, **kwargs)

    decoder = Decoder(supernet, mem_len=4)
    decoder._decoding.model = Spy(supernet)  # before the first trace
    decoder.generate(PROMPT, 9, seed=1, chunk_len=3)  # memory grows 0 -> 3 -> 4 and stays
    assert calls == [(1, 3), (1, 3), (1, 1)] + [(1, 1)] * 8
    calls.clear()
    decoder.generate(PROMPT[:2], 6, seed=2, num_samples=3, chunk_len=5, top_k=3, top_p=0.5)
    assert calls == [(1, 2)] + [(3, 1)] * 5
    assert decoder.tracing_counts() == {"forward": 1, "generate": 1}


# ------------------------------------------------------------------ sampling


def test_seed_reproduces_and_rows_follow_seed_plus_row(decoder):
    first = decoder.generate(PROMPT, 12, seed=11)
    assert np.array_equal(first, decoder.generate(PROMPT, 12, seed=11))
    assert not np.array_equal(first, decoder.generate(PROMPT, 12, seed=12))
    batch = decoder.generate(PROMPT, 12, seed=11, num_samples=3)
    assert np.array_equal(batch[0], first[0])
    assert np.array_equal(batch[1], decoder.generate(PROMPT, 12, seed=12)[0])
    assert len({tuple(row) for row in batch}) == 3
    # Fresh noise at every step: at a very high temperature (nearly uniform
    # distributions) noise reused across steps would repeat one token.
    assert len(set(decoder.generate(PROMPT, 20, seed=4, temperature=1e4)[0])) > 8


def test_top_k_1_equals_greedy(decoder):
    greedy = decoder.generate(PROMPT, 10, greedy=True)
    assert np.array_equal(decoder.generate(PROMPT, 10, top_k=1, seed=5, temperature=3.0), greedy)
    assert not np.array_equal(decoder.generate(PROMPT, 10, seed=5, temperature=3.0), greedy)


def test_decoder_traces_each_function_once(decoder):
    # Earlier tests in this module reused `decoder` with other prompt lengths,
    # batch sizes, options and memory lengths 0..4.
    decoder.generate(PROMPT * 3, 5, seed=0, num_samples=2, top_p=0.3)
    assert decoder.tracing_counts() == {"forward": 1, "generate": 1}


def numpy_filter(logits, top_k, top_p):
    """Reference: keep the top_k largest, then the smallest most likely set of mass >= top_p."""
    out = np.full_like(logits, -np.inf)
    for b, row in enumerate(logits):
        order = np.argsort(-row)
        if top_k:
            order = order[:top_k]
        probs = np.exp(row[order] - row[order].max())
        probs /= probs.sum()
        if top_p < 1.0:
            order = order[:np.searchsorted(np.cumsum(probs), top_p) + 1]
        out[b, order] = row[order]
    return out


@pytest.mark.parametrize("top_k,top_p", [(0, 1.0), (5, 1.0), (0, 0.5), (0, 0.9), (7, 0.6),
                                          (1, 0.9), (100, 0.3), (0, 1e-6)])
def test_filter_logits_matches_numpy(top_k, top_p):
    from serving.generation import filter_logits

    logits = np.random.default_rng(top_k + int(top_p * 100)).normal(0, 2, (6, 40))
    logits = logits.astype(np.float32)
    np.testing.assert_array_equal(filter_logits(logits, top_k, top_p).numpy(),
                                  numpy_filter(logits, top_k, top_p))


@pytest.mark.slow
def test_sampled_frequencies_follow_the_filtered_distribution():
    import tensorflow as tf

    from serving.generation import sample_tokens

    logits = np.log(np.array([0.35, 0.25, 0.2, 0.1, 0.06, 0.04]))
    rows = 6000
    sampler = tf.function(sample_tokens)
    seeds = np.stack([np.arange(rows), np.full(rows, 3)], axis=1).astype(np.int64)
    cases = [(1.0, 0, 1.0), (2.0, 0, 1.0), (1.0, 3, 1.0), (1.0, 0, 0.7), (0.5, 4, 0.9)]
    for temperature, top_k, top_p in cases:
        expected = np.exp(numpy_filter((logits / temperature)[None], top_k, top_p)[0])
        expected /= expected.sum()
        drawn = sampler(np.tile(logits, (rows, 1)).astype(np.float32), seeds, temperature,
                        top_k, top_p, False).numpy()
        freq = np.bincount(drawn, minlength=6) / rows
        assert np.all(freq[expected == 0] == 0), (temperature, top_k, top_p, freq)
        sigma = np.sqrt(expected * (1 - expected) / rows)
        assert np.all(np.abs(freq - expected) <= 4.5 * sigma + 1e-9), (freq, expected)


@pytest.mark.parametrize("name,kwargs", [
    ("top_p", dict(top_p=0.0)), ("top_p", dict(top_p=1.5)), ("top_p", dict(top_p=-0.1)),
    ("top_k", dict(top_k=-1)), ("temperature", dict(temperature=0.0)),
    ("temperature", dict(temperature=-1.0)), ("num_tokens", dict(num_tokens=0)),
    ("seed", dict(seed=-3)),
])
def test_invalid_arguments_name_the_argument(decoder, name, kwargs):
    from serving.generation import GenerationError

    kwargs = dict(kwargs)
    num_tokens = kwargs.pop("num_tokens", 3)
    with pytest.raises(ValueError, match=rf"^{name}=") as info:
        decoder.generate(PROMPT, num_tokens, **kwargs)
    assert isinstance(info.value, GenerationError)


def test_bad_prompt_ids(decoder):
    from serving.generation import GenerationError

    with pytest.raises(GenerationError, match="prompt_ids is empty"):
        decoder.generate([], 3)
    with pytest.raises(GenerationError, match=r"prompt_ids must be in \[0, 64\)"):
        decoder.generate([1, 64], 3)


# ---------------------------------------------------------------------- runs


@pytest.fixture(scope="module")
def word_run(tmp_path_factory, wikitext2_root):
    """(model_dir, best variables, latest variables) of a supernet run on a word build."""
    root = tmp_path_factory.mktemp("word_run")
    data_dir = build_data(root, wikitext2_root, "word")
    _, best, latest = make_run(root / "run", data_dir)
    return root / "run", best, latest


@pytest.fixture(scope="module")
def byte_run(tmp_path_factory, wikitext2_root):
    """model_dir of a fixed-architecture run on a byte build (no <eos>)."""
    root = tmp_path_factory.mktemp("byte_run")
    data_dir = build_data(root, wikitext2_root, "byte")
    make_run(root / "run", data_dir, architecture="afaf")
    return root / "run"


def _equal_variables(model, values):
    return all(np.array_equal(v.numpy(), x) for v, x in zip(model.variables, values))


@pytest.mark.slow
def test_load_run_restores_the_chosen_checkpoint(word_run):
    from serving.generation import load_run

    model_dir, best, latest = word_run
    run = load_run(model_dir)
    assert run.checkpoint_path == str(model_dir / "best" / f"ckpt-{BEST_STEP}")
    assert _equal_variables(run.model, best) and not _equal_variables(run.model, latest)
    assert run.model.derived_architecture == "afai" and run.model.compute_dtype == "float32"
    for checkpoint in ("latest", f"ckpt-{LATEST_STEP}", str(model_dir / f"ckpt-{LATEST_STEP}")):
        run = load_run(model_dir, checkpoint)
        assert run.checkpoint_path.endswith(f"ckpt-{LATEST_STEP}")
        assert _equal_variables(run.model, latest)
    assert load_run(model_dir, str(model_dir / "best")).checkpoint_path.endswith(
        f"best/ckpt-{BEST_STEP}")
    assert run.default_mem_len == 12 and run.tokenizer.kind == "word"


def test_load_run_errors(word_run, tmp_path):
    from serving.generation import GenerationError, load_run

    model_dir, _, _ = word_run
    with pytest.raises(GenerationError, match="no trained model in .*no such directory.*train.py"):
        load_run(tmp_path / "missing")
    with pytest.raises(GenerationError, match=r"no trained model in .*no config\.json"):
        load_run(tmp_path)
    shutil.copy(model_dir / "config.json", tmp_path / "config.json")
    with pytest.raises(GenerationError, match="no trained model in .*no checkpoint.*run train.py"):
        load_run(tmp_path)
    with pytest.raises(GenerationError, match="checkpoint 'ckpt-3' not found: use best, latest"):
        load_run(model_dir, "ckpt-3")
    (tmp_path / "config.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(GenerationError, match=r"cannot read .*config\.json"):
        load_run(tmp_path)


def test_load_run_rejects_a_checkpoint_of_another_model(word_run, byte_run):
    from serving.generation import GenerationError, load_run

    model_dir, _, _ = word_run
    with pytest.raises(GenerationError, match="does not fit the model of"):
        load_run(model_dir, str(byte_run / "best"))


@pytest.mark.slow
def test_tokenizer_from_model_dir_data_first_and_best_fallback(word_run, tmp_path):
    import json

    from serving.generation import GenerationError, load_run

    model_dir, best, latest = word_run
    run_dir = tmp_path / "moved"
    shutil.copytree(model_dir, run_dir)
    config = json.loads((run_dir / "config.json").read_text())
    data_dir = config["data_dir"]
    config["data_dir"] = str(tmp_path / "gone")
    (run_dir / "config.json").write_text(json.dumps(config))
    with pytest.raises(GenerationError, match="cannot find the tokenizer .* copy the built"):
        load_run(run_dir)
    (run_dir / "data").mkdir()
    for name in ("meta.json", "tokenizer-word-vocab.txt"):
        shutil.copy(os.path.join(data_dir, name), run_dir / "data" / name)
    run = load_run(run_dir)
    assert run.data_dir == str(run_dir / "data") and _equal_variables(run.model, best)
    # A run never evaluated has no best checkpoint: "best" falls back to the latest.
    shutil.rmtree(run_dir / "best")
    assert _equal_variables(load_run(run_dir).model, latest)


@pytest.mark.slow
def test_generate_text_word(word_run, caplog):
    from serving.generation import encode_prompt, generate_text, load_run

    run = load_run(word_run[0])
    tok = run.tokenizer
    vocab = set((Path(run.data_dir) / "tokenizer-word-vocab.txt").read_text().split("\n"))
    assert {"the", "of", "in"} <= vocab and "qwertyzz" not in vocab
    prompt = "the game of qwertyzz in the zzyzx qwertyzz"
    expected = [w for w in dict.fromkeys(prompt.split()) if w not in vocab]
    with caplog.at_level(logging.WARNING):
        text = generate_text(run, prompt, 15, seed=7, top_p=0.9, chunk_len=4)
    warnings = [r.getMessage() for r in caplog.records
                if "unknown to the tokenizer" in r.getMessage()]
    assert warnings == ["prompt words unknown to the tokenizer, encoded as <unk>: "
                        + " ".join(expected)]
    encoded = encode_prompt(tok, prompt)
    assert encoded.unknown_words == tuple(expected) and encoded.ids == tuple(tok.encode(prompt))
    # The unknown-word token is excluded unless allowed.
    assert tok.unknown_ids() == [tok.reserved_ids()["<unk>"]]
    tokens = run.decoder().generate(encoded.ids, 15, seed=7, top_p=0.9, chunk_len=4,
                                    exclude_ids=tok.unknown_ids())[0]
    assert text == " " + tok.decode(tokens)  # words: one space after the prompt
    allowed = run.decoder().generate(encoded.ids, 15, seed=7, top_p=0.9, chunk_len=4)[0]
    assert generate_text(run, prompt, 15, seed=7, top_p=0.9, chunk_len=4,
                         allow_unk=True) == " " + tok.decode(allowed)
    # "<unk>" itself is a word of WikiText, not an unknown one.
    assert encode_prompt(tok, "the <unk> of").unknown_words == ()
    # An empty prompt starts at a line start (<eos>) that is not part of the text.
    empty = encode_prompt(tok, "")
    assert empty.ids == (tok.eos_id,) and empty.from_line_start
    text = generate_text(run, "", 6, greedy=True)
    assert text == tok.decode(run.decoder().generate([tok.eos_id], 6, greedy=True,
                                                     exclude_ids=tok.unknown_ids())[0])


def test_generate_text_byte_fixed_architecture(byte_run):
    from serving.generation import GenerationError, encode_prompt, generate_text, load_run

    run = load_run(byte_run)
    tok = run.tokenizer
    assert tok.kind == "byte" and tok.eos_id is None and run.model.derived_architecture == "afaf"
    empty = encode_prompt(tok, "")
    assert empty.ids == tuple(tok.encode("\n")) and len(empty.ids) == 1
    prompt = "Valkyria \u00e9t\u00e9"
    text = generate_text(run, prompt, 12, seed=1)
    tokens = run.decoder().generate(tok.encode(prompt), 12, seed=1, chunk_len=16)[0]
    assert prompt + text == tok.decode(tok.encode(prompt) + tokens.tolist())
    with pytest.raises(GenerationError, match="not valid UTF-8"):
        encode_prompt(tok, "bad \udcff surrogate")
