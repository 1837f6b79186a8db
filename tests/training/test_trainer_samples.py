"""The trainer's evaluation samples (`Trainer.sample_text`) never hold the unknown-word
token: they draw through `samplers.sampler.sample_tokens` with the tokenizer's
`unknown_ids()` excluded, as generate.py does by default."""

import numpy as np
import pytest


@pytest.mark.slow
def test_samples_skip_the_unknown_word_token_of_a_model_that_prefers_it(tiny_data, tmp_path,
                                                                          caplog):
    import tensorflow as tf

    import data_utils
    from tests.training.conftest import tiny_config
    from training.run.trainer import Trainer

    tokenizer = data_utils.load_tokenizer(str(tiny_data))
    config = tiny_config(tiny_data, tmp_path / "run", model_architecture="afaf")
    trainer = Trainer(config, data_utils.load_meta(str(tiny_data)), tf.distribute.get_strategy(),
                      tokenizer=tokenizer)
    (unk,) = tokenizer.unknown_ids()
    softmax = trainer.model.softmax
    assert unk < softmax.head_tokens  # a head id: its bias is one entry of head_bias
    bias = softmax.head_bias.numpy()
    bias[unk] += 12.0
    softmax.head_bias.assign(bias)
    # The biased model puts nearly all its mass on <unk> after any context.
    ids = tf.constant([tokenizer.encode("the game was released in")], tf.int32)
    hidden, _ = trainer.model(ids, trainer.model.initial_state(1, 8), training=False)
    assert np.exp(trainer.model.log_probs(hidden)[0, -1, unk].numpy()) > 0.99
    caplog.set_level("INFO")
    text = trainer.sample_text(200, step=3)
    _, sample = text.split(" || ")
    words = sample.split()
    assert "<unk>" not in words and len(words) > 100, sample
    # The first sample says before it starts that it traces the loop (no silent stretch);
    # the next one does not.
    assert trainer.sample_text(5, step=4)
    tracing = [r.getMessage() for r in caplog.records if "tracing the decoding" in r.getMessage()]
    assert tracing == ["sample at step 3: tracing the decoding loop first (once per run; tens "
                       "of seconds on a CPU)"]
