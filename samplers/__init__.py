"""Sampling strategies: one small function a file, shared by serving and the trainer.

As KerasHub keeps `samplers/`, each strategy stands alone and is tested alone
against a NumPy reference (tests/samplers/):

    greedy.py        `greedy(log_probs)`: the argmax.
    temperature.py   `with_temperature(log_probs, temperature)`: log-probs / T.
    top_k.py         `top_k_filter(logits, top_k)`: keep the k largest.
    top_p.py         `top_p_filter(logits, top_p)`: keep the nucleus of mass p.
    gumbel.py        `gumbel_max(logits, seeds)`: one draw per row, stateless seeds.
    mask.py          `mask_tokens(logits, ids)`: ids never drawn (-inf), e.g.
                     the unknown-word token (`Tokenizer.unknown_ids()`).
    sampler.py       `sample_tokens`: the excluded ids, temperature, top-k,
                     top-p, then one draw (or greedy); what
                     `serving.decoder.Decoder`, the exported SavedModel and
                     the trainer's evaluation samples run.

All work on float `[B, V]` tensors (B rows, V the vocabulary) inside or
outside a `tf.function`, with the options as Python scalars or scalar tensors.
Importing this package loads nothing; the modules load TensorFlow.
"""
