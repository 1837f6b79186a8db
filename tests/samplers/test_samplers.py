"""Each sampling strategy alone against a brute-force NumPy reference (samplers/)."""

import numpy as np
import pytest


def _logits(seed, shape=(6, 40), scale=2.0):
    return np.random.default_rng(seed).normal(0, scale, shape).astype(np.float32)


def _softmax(row):
    finite = np.isfinite(row)
    out = np.zeros_like(row, dtype=np.float64)
    out[finite] = np.exp(row[finite] - row[finite].max())
    return out / out.sum()


def test_greedy_is_the_argmax():
    from samplers.greedy import greedy

    logits = _logits(0)
    np.testing.assert_array_equal(greedy(logits).numpy(), np.argmax(logits, axis=-1))
    # A tie goes to the first index, as np.argmax.
    tied = np.array([[0.0, 3.0, 3.0, -1.0]], np.float32)
    assert greedy(tied).numpy().tolist() == [1]


@pytest.mark.parametrize("temperature", [0.25, 1.0, 3.0])
def test_temperature_divides_the_log_probs(temperature):
    from samplers.temperature import with_temperature

    logits = _logits(1)
    np.testing.assert_allclose(with_temperature(logits, temperature).numpy(),
                               logits / np.float32(temperature), rtol=1e-6)


def numpy_top_k(logits, k):
    out = np.full_like(logits, -np.inf)
    for b, row in enumerate(logits):
        if not k or k >= row.size:
            out[b] = row
            continue
        kth = np.sort(row)[::-1][k - 1]
        keep = row >= kth  # ties with the k-th value kept
        out[b, keep] = row[keep]
    return out


@pytest.mark.parametrize("k", [0, 1, 5, 39, 40, 100])
def test_top_k_keeps_the_k_largest(k):
    from samplers.top_k import top_k_filter

    logits = _logits(k)
    np.testing.assert_array_equal(top_k_filter(logits, k).numpy(), numpy_top_k(logits, k))
    tied = np.array([[1.0, 2.0, 2.0, 0.5]], np.float32)
    assert np.isfinite(top_k_filter(tied, 1).numpy()).tolist() == [[False, True, True, False]]


def numpy_top_p(logits, p):
    out = np.full_like(logits, -np.inf)
    for b, row in enumerate(logits):
        if p >= 1.0:
            out[b] = row
            continue
        probs = _softmax(row)
        order = np.argsort(-row, kind="stable")
        mass, kept = 0.0, []
        for i in order:  # brute force: add tokens until the mass reaches p
            if not np.isfinite(row[i]) or (kept and mass >= p):
                break
            kept.append(i)
            mass += probs[i]
        last = row[kept[-1]]
        keep = np.isfinite(row) & (row >= last)  # ties with the last kept value
        out[b, keep] = row[keep]
    return out


@pytest.mark.parametrize("p", [1e-6, 0.3, 0.5, 0.9, 0.999, 1.0])
def test_top_p_keeps_the_nucleus(p):
    from samplers.top_p import top_p_filter

    logits = _logits(int(p * 1000))
    np.testing.assert_array_equal(top_p_filter(logits, p).numpy(), numpy_top_p(logits, p))
    # Entries already removed (-inf, e.g. by top-k) stay removed.
    masked = logits.copy()
    masked[:, ::2] = -np.inf
    np.testing.assert_array_equal(top_p_filter(masked, p).numpy(), numpy_top_p(masked, p))


def test_gumbel_max_follows_softmax_and_its_seeds():
    from samplers.gumbel import gumbel_max

    probs = np.array([0.4, 0.3, 0.2, 0.1, 0.0])
    with np.errstate(divide="ignore"):
        logits = np.log(probs).astype(np.float32)  # the last one -inf: never drawn
    rows = 4000
    seeds = np.stack([np.arange(rows), np.full(rows, 7)], axis=1).astype(np.int64)
    drawn = gumbel_max(np.tile(logits, (rows, 1)), seeds).numpy()
    freq = np.bincount(drawn, minlength=5) / rows
    assert freq[4] == 0
    sigma = np.sqrt(probs * (1 - probs) / rows)
    assert np.all(np.abs(freq - probs) <= 4.5 * sigma + 1e-9), freq
    # Row r depends on its own seed only: the same seed draws the same token alone.
    again = gumbel_max(np.tile(logits, (3, 1)), seeds[[10, 0, 2500]]).numpy()
    assert again.tolist() == [drawn[10], drawn[0], drawn[2500]]


def test_sample_tokens_composes_temperature_top_k_top_p_and_greedy():
    from samplers.gumbel import gumbel_max
    from samplers.sampler import filter_logits, sample_tokens

    logits = _logits(3)
    seeds = np.stack([np.arange(6), np.zeros(6)], axis=1).astype(np.int64)
    np.testing.assert_array_equal(filter_logits(logits, 5, 0.8).numpy(),
                                  numpy_top_p(numpy_top_k(logits, 5), 0.8))
    expected = gumbel_max(numpy_top_p(numpy_top_k(logits / np.float32(0.7), 5), 0.8), seeds)
    np.testing.assert_array_equal(sample_tokens(logits, seeds, 0.7, 5, 0.8).numpy(),
                                  expected.numpy())
    np.testing.assert_array_equal(
        sample_tokens(logits, seeds, 0.7, 5, 0.8, greedy=True).numpy(), logits.argmax(-1))


@pytest.mark.parametrize("ids", [[], [3], [0, 7, 39], [7, 7]])
def test_mask_tokens_sets_the_given_ids_to_minus_inf(ids):
    from samplers.mask import mask_tokens

    logits = _logits(4)
    expected = logits.copy()
    for i in ids:  # one column at a time, in every row
        expected[:, i] = -np.inf
    np.testing.assert_array_equal(mask_tokens(logits, ids).numpy(), expected)


def test_sample_tokens_never_draws_an_excluded_id_even_when_it_is_the_likeliest():
    from samplers.gumbel import gumbel_max
    from samplers.sampler import sample_tokens

    rows = 200  # a leak of the masked id would show in nearly every row
    logits = np.tile(_logits(5, (1, 40)), (rows, 1))
    logits[:, 11] = 50.0  # nearly all the mass
    seeds = np.stack([np.arange(rows), np.full(rows, 3)], axis=1).astype(np.int64)
    assert (sample_tokens(logits, seeds).numpy() == 11).all()  # drawn when allowed
    for options in ({}, {"temperature": 2.0}, {"top_k": 1}, {"top_p": 0.5}, {"greedy": True}):
        drawn = sample_tokens(logits, seeds, exclude_ids=[11, 12], **options).numpy()
        assert not np.isin(drawn, [11, 12]).any(), options
    # The draw is the one of the masked distribution, the same seeds.
    masked = logits.copy()
    masked[:, [11, 12]] = -np.inf
    np.testing.assert_array_equal(sample_tokens(logits, seeds, 0.7, 5, 0.8, exclude_ids=[11, 12]),
                                  sample_tokens(masked, seeds, 0.7, 5, 0.8))
    np.testing.assert_array_equal(sample_tokens(logits, seeds, exclude_ids=[11, 12]),
                                  gumbel_max(masked, seeds))
    np.testing.assert_array_equal(
        sample_tokens(logits, seeds, greedy=True, exclude_ids=[11]).numpy(),
        np.delete(logits, 11, axis=1).argmax(-1) + (np.delete(logits, 11, axis=1).argmax(-1)
                                                    >= 11))
