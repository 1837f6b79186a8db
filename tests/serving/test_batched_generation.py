"""Many prompts as one batch, stop conditions, the repetition penalty and streaming.

Every batched or streamed result is compared with the one-prompt-at-a-time
decoder it must equal (prompt i with seed + i); the repetition penalty with a
NumPy transcription over a from-scratch recomputation of the context; stops
with the text cut by hand.
"""

import numpy as np
import pytest

from tests.helpers.runs import PROMPT, make_model, make_word_package

# Prompt lengths on both sides of the decoder's memory (4): shorter ones run alone first.
PROMPTS = [PROMPT[:1], PROMPT[:2], PROMPT, PROMPT[:3] * 3, PROMPT[:4]]
NUM_TOKENS = [6, 9, 3, 12, 1]


@pytest.fixture(scope="module")
def supernet():
    return make_model(seed=0)


@pytest.fixture(scope="module")
def decoder(supernet):
    from serving.generation import Decoder

    return Decoder(supernet, mem_len=4)


@pytest.fixture(scope="module")
def sha_rnn_decoder():
    from model.families import get_family
    from serving.generation import Decoder

    family = get_family("sha_rnn")
    model = family.build(family.preset_config(
        "sha_rnn_tiny", vocab_size=64, dropout=0.0, dropout_input=0.0, dropout_hidden=0.0,
        attn_dropout=0.0))
    rng = np.random.default_rng(2)
    for v in model.variable_groups()["weights"]:
        if len(v.shape) >= 2:
            v.assign(rng.normal(0.0, 0.4, v.shape).astype(np.float32))
    return Decoder(model, mem_len=5)


def one_at_a_time(decoder, prompts, counts, seed, **options):
    """Each prompt alone, with seed + its index: the rows a batch must reproduce."""
    rows = []
    for i, (prompt, count) in enumerate(zip(prompts, counts)):
        row = decoder.generate(prompt, count, seed=seed + i, chunk_len=3, **options)[0]
        rows.append(row[row >= 0])
    return rows


@pytest.mark.parametrize("sampler", [None, "greedy", "top_k"])
def test_a_batch_of_prompts_of_any_length_equals_one_at_a_time(decoder, sampler):
    from samplers.registry import get_sampler

    chosen = get_sampler("top_k", top_k=5, temperature=1.5) if sampler == "top_k" else sampler
    many = decoder.generate_many(PROMPTS, NUM_TOKENS, seed=3, sampler=chosen, chunk_len=3)
    alone = one_at_a_time(decoder, PROMPTS, NUM_TOKENS, 3, sampler=chosen)
    assert [row.tolist() for row in many] == [row.tolist() for row in alone]
    assert [len(row) for row in many] == NUM_TOKENS
    # The rows differ: the check is not met by one repeated sequence.
    assert len({tuple(row.tolist()) for row in many}) > 2
    # Two batches of two and one equal one batch of five.
    split = decoder.generate_many(PROMPTS, NUM_TOKENS, seed=3, sampler=chosen, chunk_len=3,
                                  batch_size=2)
    assert [row.tolist() for row in split] == [row.tolist() for row in many]


def test_rows_join_once_the_memory_is_full(decoder, sha_rnn_decoder):
    from samplers.decoding import join_after_of

    assert decoder._decoding.join_after == 4
    assert sha_rnn_decoder._decoding.join_after == 5
    # A state whose shapes keep growing never joins: every prompt runs alone.
    def growing(ids, state):
        grown = [np.concatenate([s, np.zeros((1, ids.shape[1], 1), np.float32)], 1)
                 for s in state]
        return None, grown
    assert join_after_of(growing, [np.zeros((1, 0, 1), np.float32)], 4) is None


def test_sha_rnn_batch_equals_one_at_a_time(sha_rnn_decoder):
    many = sha_rnn_decoder.generate_many(PROMPTS, NUM_TOKENS, seed=8, chunk_len=3)
    alone = one_at_a_time(sha_rnn_decoder, PROMPTS, NUM_TOKENS, 8)
    assert [row.tolist() for row in many] == [row.tolist() for row in alone]


def test_stop_ids_end_each_row_before_its_first_stop(decoder):
    free = decoder.generate_many(PROMPTS, 12, seed=5, chunk_len=3)
    # A token that some rows draw after their first position, and one row never.
    counts = {}
    for row in free:
        for token in set(row[1:].tolist()):
            counts[token] = counts.get(token, 0) + 1
    stop = max(counts, key=counts.get)
    stopped = decoder.generate_many(PROMPTS, 12, seed=5, chunk_len=3, stop_ids=[stop])
    for row, cut in zip(free, stopped):
        expected = row.tolist()
        expected = expected[:expected.index(stop)] if stop in expected else expected
        assert cut.tolist() == expected
    assert any(len(cut) < 12 for cut in stopped) and stop not in np.concatenate(stopped)
    # One prompt, several samples: -1 after each row's stop.
    rows = decoder.generate(PROMPT, 12, num_samples=3, seed=5, chunk_len=3, stop_ids=[stop])
    alone = decoder.generate(PROMPT, 12, num_samples=3, seed=5, chunk_len=3)
    for row, free_row in zip(rows, alone):
        kept = free_row.tolist()
        kept = kept[:kept.index(stop)] if stop in kept else kept
        assert row[:len(kept)].tolist() == kept and (row[len(kept):] == -1).all()


def _full_log_probs(model, context):
    hidden, _ = model(np.asarray(context, np.int32)[None], None, training=False)
    return model.log_probs(hidden)[0, -1].numpy().astype(np.float64)


def test_repetition_penalty_matches_a_numpy_transcription(supernet):
    """Greedy decoding with the penalty, the whole context recomputed at every step:
    seen ids' log-probabilities times the penalty, normalised again (argmax unchanged
    by the normalisation, so the tokens are compared, and each step's distribution)."""
    from samplers.decoding import penalize
    from serving.generation import Decoder

    penalty, num_tokens = 3.0, 10
    context, expected = list(PROMPT), []
    for _ in range(num_tokens):
        log_probs = _full_log_probs(supernet, context)
        seen = np.zeros(log_probs.shape, bool)
        seen[context] = True
        penalized = np.where(seen, log_probs * penalty, log_probs)
        expected.append(int(np.argmax(penalized - np.logaddexp.reduce(penalized))))
        context.append(expected[-1])
    decoder = Decoder(supernet, mem_len=len(PROMPT) + num_tokens)
    tokens = decoder.generate(PROMPT, num_tokens, greedy=True, repetition_penalty=penalty)
    assert tokens[0].tolist() == expected
    plain = decoder.generate(PROMPT, num_tokens, greedy=True)[0].tolist()
    assert plain != expected  # the penalty changes the greedy path
    assert len(set(expected)) >= len(set(plain))

    rng = np.random.default_rng(0)
    log_probs = np.log(rng.dirichlet(np.ones(7), size=2)).astype(np.float32)
    seen = rng.random((2, 7)) < 0.4
    out = penalize(log_probs, seen, np.float32(1.7)).numpy()
    reference = np.where(seen, log_probs * 1.7, log_probs).astype(np.float64)
    reference -= np.logaddexp.reduce(reference, axis=1, keepdims=True)
    np.testing.assert_allclose(out, reference, atol=1e-5)
    assert np.array_equal(penalize(log_probs, seen, np.float32(1.0)).numpy(), log_probs)


@pytest.mark.parametrize("every", [1, 5])
def test_streamed_tokens_equal_one_call(decoder, every):
    options = dict(seed=9, chunk_len=3, repetition_penalty=1.5)
    whole = decoder.generate(PROMPT, 11, **options)[0]
    pieces = list(decoder.stream(PROMPT, 11, every=every, **options))
    assert np.concatenate(pieces).tolist() == whole.tolist()
    assert len(pieces) == -(-11 // every)
    stop = int(whole[6])
    first = whole.tolist().index(stop)
    cut = list(decoder.stream(PROMPT, 11, every=every, stop_ids=[stop], **options))
    assert (np.concatenate(cut).tolist() if cut else []) == whole[:first].tolist()


@pytest.fixture(scope="module")
def package(tmp_path_factory, word_data):
    return make_word_package(tmp_path_factory.mktemp("batched"), word_data)[0]


TEXTS = ["the game", "in 1996 , the band released their first album and", "the", "he"]


def test_text_prompts_batched_equal_one_at_a_time_with_stops(package):
    options = dict(num_tokens=15, sampler="top_p", top_p=0.95, temperature=1.2)
    alone = [package.generate(text, seed=21 + i, **options) for i, text in enumerate(TEXTS)]
    assert package.generate(TEXTS, seed=21, **options) == alone
    # A word that follows some prompts: each continuation ends before it.
    words = [w for text, out in zip(TEXTS, alone) for w in out[len(text):].split()[1:]]
    stop = " " + max(set(words), key=words.count)
    stopped = package.generate(TEXTS, seed=21, stop=[stop, "never-seen"], **options)
    for text, free, cut in zip(TEXTS, alone, stopped):
        tail = free[len(text):]
        assert cut == text + (tail[:tail.index(stop)] if stop in tail else tail)
    assert any(len(cut) < len(free) for cut, free in zip(stopped, alone))


def test_an_empty_prompt_in_a_list_starts_at_a_line_start_as_alone(package):
    """As a single "" prompt does, and as the SavedModel's generate_batch does."""
    alone = [package.generate(text, num_tokens=8, seed=5 + i) for i, text in
             enumerate(["the", ""])]
    assert package.generate(["the", ""], num_tokens=8, seed=5) == alone
    assert alone[1].strip()


def test_streamed_text_equals_the_batch_call(package):
    for options in ({"seed": 4}, {"seed": 4, "stop": " the", "repetition_penalty": 1.3}):
        whole = package.generate("the game", num_tokens=20, **options)
        pieces = list(package.stream("the game", num_tokens=20, **options))
        assert "the game" + "".join(pieces) == whole and len(pieces) > 1


@pytest.mark.parametrize("call, message", [
    (lambda lm: lm.generate("the", stop=""), "stop holds an empty string"),
    (lambda lm: lm.generate("the", stop=["a", ""]), "stop holds an empty string"),
    (lambda lm: lm.generate("the", repetition_penalty=0), "repetition_penalty=0 must be"),
    (lambda lm: lm.generate(["the"], batch_size=0, seed=1), "batch_size=0 must be"),
    (lambda lm: list(lm.stream(["the"])), "prompt must be a string"),
])
def test_bad_generation_arguments_name_the_argument(package, call, message):
    import par

    with pytest.raises(par.GenerationError) as error:
        call(package)
    assert message in str(error.value) and "\n" not in str(error.value)
