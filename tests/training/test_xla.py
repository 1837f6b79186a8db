"""--xla: the compiled training, evaluation and generation steps equal the plain ones.

Each case trains two copies of one model (same initial weights) on the same
real batches, one with `--xla` (the forward and backward pass compiled with
jit_compile=True, the static-shape paths of model/xla.py) and one without,
and compares every step's loss and gradient norms, then the weights, the
optimizer moments and the memories. Dropout is on where the case says so:
the random bits are the same with and without XLA (Philox named, model/xla.py).
"""

import numpy as np
import pytest

from tests.helpers.trainers import SPAN_TINY, as_arrays, assert_close, first_batches, make_trainer

STEPS = 3
_BASE = [
    "--preset=tiny",
    "--num_blocks=2",
    "--learning_rate=3e-3",
    "--clip_norm=0.5",
    "--max_steps=100",
    "--sample_tokens=0",
    "--arch_warmup_steps=0",
    "--eval_mem_len=8",
]
# name -> flags. Full and adaptive softmax (tiny: cutoffs 16, 32), soft and
# hard search with dropout on, a fixed Transformer-XL, adaptive span with a
# span loss, and bfloat16 (compared more loosely below).
CASES = {
    "soft_adaptive_dropout": ["--dropout=0.1"],
    "hard_dropout": ["--search_mode=hard", "--dropout=0.1"],
    "transformer_xl_full_softmax": ["--architecture=transformer_xl", "--cutoffs=",
                                    "--dropout=0"],
    "adaptive_span": ["--architecture=transformer_xl", "--attention=adaptive_span",
                      "--span_max=16", "--span_ramp=4", "--span_loss_coef=0.05",
                      "--dropout=0"],
    # The reference's recipe: learned key positions (window layout), adagrad_clip;
    # its epsilon 1e-10 would turn gradients that are zero up to rounding (far
    # key positions, whose weight the span mask zeroes) into full steps of
    # either sign, so the two programs' rounding would show in the weights.
    "adaptive_span_reference": [*SPAN_TINY, "--dropout=0", "--span_loss_coef=0.05",
                                "--epsilon=1e-6"],
    "bfloat16": ["--precision=mixed_bfloat16", "--dropout=0.1"],
    # Loss scaling (LossScaleOptimizer's conditional updates) inside the program.
    "float16": ["--precision=mixed_float16", "--dropout=0"],
}


def _config(data_dir, model_dir, *extra):
    from absl import flags

    import train as train_cli

    fv = train_cli.define_flags(flags.FlagValues())
    fv(["train.py", f"--data_dir={data_dir}", f"--model_dir={model_dir}", *_BASE, *extra])
    return train_cli.config_from_flags(fv)[0]


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_xla_step_equals_plain_step(tiny_data, tmp_path, case):
    config = _config(tiny_data, tmp_path / "plain", *CASES[case])
    plain = make_trainer(config)
    compiled = make_trainer(config.replace(model_dir=str(tmp_path / "xla"), xla=True),
                        copy_from=plain)
    # Half precision rounds differently once XLA fuses: compare as it allows.
    half = case in ("bfloat16", "float16")
    rel = 2e-2 if half else 1e-5
    for inputs, targets in first_batches(config, STEPS):
        want = plain.train_step(inputs, targets)
        got = compiled.train_step(inputs, targets)
        for key in ("loss", "nll", "grad_norm"):
            assert got[key] == pytest.approx(want[key], rel=rel), key
        if "arch_grad_norm" in want:  # a small difference of large terms
            assert got["arch_grad_norm"] == pytest.approx(want["arch_grad_norm"], rel=rel,
                                                          abs=1e-6)
        assert got["finite"]
    arch = {id(v) for v in compiled.model.variables + plain.model.variables
            if "arch_logits" in v.path}
    weights = lambda t: [v for v in t.model.variables if id(v) not in arch]  # noqa: E731
    pairs = {"weights": (weights(compiled), weights(plain)),
             "optimizer": (compiled.optimizers["weights"].variables,
                           plain.optimizers["weights"].variables),
             "state": (compiled.global_state(), plain.global_state())}
    for what, (got, want) in pairs.items():
        got, want = as_arrays(got), as_arrays(want)
        if half:
            # Adam moves near-zero biases by +-lr whatever their rounding, so
            # compare whole vectors, not variable by variable.
            got, want = [np.concatenate([a.ravel() for a in got])], [
                np.concatenate([b.ravel() for b in want])]
        assert_close(got, want, rel, what)
    # Architecture logits: their gradients are ~1e-6 (a small difference of
    # large terms, summed in another order under XLA) and Adam normalises
    # them, so rounding moves each update by a fraction of the learning rate
    # (1e-2 per step here): bounded well below one step.
    for a, b in zip(compiled.model.variables, plain.model.variables):
        if id(a) in arch:
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=0,
                                       atol=1e-2 if half else 1e-3)
    # Compiled once: the static paths kept every shape fixed.
    assert compiled._forward_backward.experimental_get_tracing_count() == 1
    assert compiled._step_fn.experimental_get_tracing_count() == 1

    got, want = compiled.evaluate("valid", 3), plain.evaluate("valid", 3)
    assert got["nll"] == pytest.approx(want["nll"], rel=rel)


def test_static_paths_are_taken_under_xla_only():
    """The masked tails and lookups run under XLA and equal the partitioned ones."""
    import tensorflow as tf

    from model.layers.adaptive_softmax import AdaptiveEmbedding, AdaptiveSoftmax

    softmax = AdaptiveSoftmax(vocab_size=50, d_model=8, cutoffs=(10, 30))
    embedding = AdaptiveEmbedding(vocab_size=50, d_model=8, cutoffs=(10, 30))
    rng = np.random.default_rng(0)
    hidden = tf.constant(rng.standard_normal((3, 7, 8)), tf.float32)
    targets = tf.constant(rng.integers(0, 50, (3, 7)), tf.int32)
    targets = tf.tensor_scatter_nd_update(targets, [[0, 0]], [-1])  # one padding position

    def run(hidden, targets):  # (gradients: compared in the trainer cases above)
        return softmax.nll(hidden, targets), embedding(tf.maximum(targets, 0))

    plain = tf.function(run)
    compiled = tf.function(run, jit_compile=True)
    for got, want in zip(compiled(hidden, targets), plain(hidden, targets)):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)
    assert float(plain(hidden, targets)[0][0, 0]) == 0.0
    graph = lambda fn: {op.type for op in fn.get_concrete_function(  # noqa: E731
        hidden, targets).graph.get_operations()}
    assert "DynamicPartition" in graph(plain)
    assert "DynamicPartition" not in graph(compiled)


def test_dropout_bits_equal_with_and_without_xla():
    import tensorflow as tf

    from model.layers.dropout import random_bytes
    from model.xla import uniform_from_bits

    seed = tf.constant([12345, 678], tf.int32)

    def draw():
        return random_bytes([5, 37], seed), uniform_from_bits([11], seed)

    plain = tf.function(draw)()
    compiled = tf.function(draw, jit_compile=True)()
    for got, want in zip(compiled, plain):
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    # And the float conversion is TensorFlow's own (the default algorithm).
    np.testing.assert_array_equal(plain[1].numpy(),
                                  tf.random.stateless_uniform([11], seed).numpy())


@pytest.mark.parametrize("variant", [
    dict(),  # supernet: argmax switch, adaptive softmax
    dict(architecture="aafa", attention="adaptive_span", span_init=0.5, span_max=16,
         span_ramp=4),
])
@pytest.mark.slow
def test_compiled_generation_equals_plain(variant):
    """The XLA-compiled decoder gives the plain decoder's tokens and log-probs."""
    from serving.generation import Decoder
    from tests.helpers.runs import PROMPT, make_model

    model = make_model(seed=3, **variant)
    plain, compiled = Decoder(model, mem_len=6), Decoder(model, mem_len=6, jit_compile=True)
    got = compiled.generate(PROMPT, 8, greedy=True, chunk_len=3, return_log_probs=True)
    want = plain.generate(PROMPT, 8, greedy=True, chunk_len=3, return_log_probs=True)
    assert got[0].tolist() == want[0].tolist()
    np.testing.assert_allclose(got[1], want[1], atol=2e-5)


@pytest.mark.slow
def test_sha_rnn_compiled_step_equals_plain(tiny_data, tmp_path):
    """The other model family compiles too (keras LSTM inside the XLA step)."""
    from tests.helpers.trainers import family_config

    config = family_config(tiny_data, tmp_path / "plain", "sha_rnn")
    plain = make_trainer(config)
    compiled = make_trainer(config.replace(model_dir=str(tmp_path / "xla"), xla=True),
                        copy_from=plain)
    for inputs, targets in first_batches(config, 2):
        want = plain.train_step(inputs, targets)
        got = compiled.train_step(inputs, targets)
        assert got["loss"] == pytest.approx(want["loss"], rel=1e-5)
        assert got["grad_norm"] == pytest.approx(want["grad_norm"], rel=1e-5)
    assert_close(as_arrays(compiled.model.variables), as_arrays(plain.model.variables), 1e-5,
                  "weights")
