"""evaluation.stream: the segment plan covers every transition once, in row order; the
evaluator can be abandoned and scores a plan as a slow eager loop does.

The plan is checked on a stream of distinct ids (id k at position k), so each
scored pair (input, target) names its transition. The evaluator's numbers are
compared with an eager batch-1 loop over the same rows in
tests/serving/test_evaluation.py (both families, trained runs) and with the
trainer's figure; here a small untrained model checks `should_stop` and the
records-only plan.
"""

import numpy as np
import pytest


def _pairs(inputs, targets):
    return list(zip(np.asarray(inputs).ravel().tolist(), np.asarray(targets).ravel().tolist()))


@pytest.mark.parametrize("length,batch_size,seq_len", [(103, 4, 5), (101, 4, 5), (9, 3, 4),
                                                       (2, 1, 1), (60, 1, 7)])
def test_segment_plan_scores_every_transition_once_rows_continuing(length, batch_size, seq_len):
    from evaluation.stream import segment_plan

    ids = np.arange(length)
    plan = segment_plan(ids, batch_size, seq_len)
    records = (length - 1) // (batch_size * seq_len)
    assert plan.records == records
    pairs, last, segments = [], None, 0
    for inputs, targets in plan.batched:
        assert inputs.shape == targets.shape == (batch_size, seq_len)
        if last is not None:  # row b of segment t continues row b of segment t-1
            np.testing.assert_array_equal(inputs[:, 0], last[:, -1])
        last = targets
        segments += 1
        pairs += _pairs(inputs, targets)
    assert segments == records
    tail = plan.tail
    if records:  # the tail continues row B-1 from its last target
        assert tail[0] == last[-1, -1] == batch_size * records * seq_len
    else:
        np.testing.assert_array_equal(tail, ids)
    assert plan.tail_segments == -(-(tail.size - 1) // seq_len)
    pairs += _pairs(tail[:-1], tail[1:])
    assert sorted(pairs) == [(k, k + 1) for k in range(length - 1)]  # each once


@pytest.mark.slow
def test_should_stop_abandons_and_records_plan_has_no_tail():
    from evaluation.stream import StreamEvaluator, records_plan, segment_plan
    from model.families import build_model, get_family

    model = build_model(get_family("transformer_xl").preset_config(
        "tiny", vocab_size=50, architecture="transformer_xl"))
    ids = np.random.default_rng(0).integers(0, 50, 200)
    evaluator = StreamEvaluator(model, 6)
    asked = []

    def stop():
        asked.append(1)
        return len(asked) == 2

    assert evaluator.run(segment_plan(ids, 3, 8), should_stop=stop) is None
    assert len(asked) == 2
    whole = evaluator.evaluate(ids, 3, 8)
    assert whole.tokens == 199 and whole.batched_segments == 8 and whole.tail_segments == 1
    # The first 5 records alone: the batched part's first 5 segments, no tail.
    plan = segment_plan(ids, 3, 8)
    first = records_plan(list(plan.batched)[:5], 5, 3, 8)
    part = evaluator.run(first)
    assert part.tokens == 5 * 3 * 8 and part.tail.count == 0 and part.tail_segments == 0
    # ...against an eager loop over the same rows, the state carried by hand.
    rows = np.stack([ids[b * 64:b * 64 + 41] for b in range(3)])  # R*T = 64 ids a row
    state, total = model.initial_state(3, 6), 0.0
    for t in range(5):
        window = rows[:, t * 8:t * 8 + 9]
        hidden, state = model(window[:, :-1], state, training=False, mem_len=6)
        total += float(np.sum(model.token_nll(hidden, window[:, 1:]).numpy(), dtype=np.float64))
    np.testing.assert_allclose(part.total_nll, total, rtol=2e-6)
    assert evaluator.tracing_count() == 1
