"""The one decoding loop: a compiled `tf.while_loop` with the model's state as the cache.

`decode` runs inside a graph (a `tf.function` or a SavedModel signature):
the prompt once, in chunks of `chunk_len` tokens carrying the state, then
per new token: the excluded ids set to -inf (`mask.mask_tokens`), one draw
by the chosen sampler (`tf.switch_case` over the registered `Sampler`
classes, each reading its parameters from one float32 vector), and one
forward pass of length 1 over the state (none after the last token). Row r
of the B = num_samples rows draws step i with the stateless seed
`(seed + r, step_offset + i)`.

`CompiledDecoding` wraps it for a language model (model/interface.py) and a
memory length: a compiled forward pass and the compiled loop, each traced
once per set of registered samplers whatever the prompt, chunk, batch or
memory length (ids `[B, None]`, the state with `state_signature()`'s relaxed
shapes). `serving.decoder.Decoder` (generate.py, the Python API), the
SavedModel's generate signatures (serving/export.py, with its own forward)
and the trainer's evaluation samples (training/report/samples.py) all run
`decode`.

Size glossary: B rows, T tokens of a forward pass, V vocabulary, N new
tokens, L prompt tokens, P sampler parameters.
"""

import numpy as np
import tensorflow as tf

from samplers.base import SamplerError
from samplers.mask import mask_tokens
from samplers.registry import registered


def sampler_checks(samplers, index, params):
    """Assertions that `index` names one of `samplers` and `params` fits it."""
    checks = [tf.debugging.assert_less(index, len(samplers), message="unknown sampler"),
              tf.debugging.assert_greater_equal(index, 0, message="unknown sampler")]
    with tf.control_dependencies(checks):
        index = tf.clip_by_value(index, 0, len(samplers) - 1)

    def branch(cls):
        def check():
            with tf.control_dependencies(cls.graph_checks(params)):
                return tf.constant(True)
        return check

    return [*checks, tf.switch_case(index, [branch(cls) for cls in samplers])]


def draw(samplers, index, params, log_probs, seeds):
    """int32 [B]: the sampler `samplers[index]` with `params` on log_probs [B, V]."""
    if len(samplers) == 1:
        return samplers[0].from_vector(params)(log_probs, seeds)
    branches = [lambda cls=cls: tf.cast(cls.from_vector(params)(log_probs, seeds), tf.int32)
                for cls in samplers]
    return tf.switch_case(index, branches)


def _prefill(forward, ids, state, chunk_len, vocab_size, state_shapes):
    """(log_probs [1, V] after the prompt ids [L], the state after it)."""
    chunks = (tf.size(ids) + chunk_len - 1) // chunk_len

    def body(i, log_probs, *state):
        log_probs, state = forward(ids[None, i * chunk_len:(i + 1) * chunk_len], list(state))
        return (i + 1, tf.cast(log_probs, tf.float32), *state)

    _, log_probs, *state = tf.while_loop(
        lambda i, *_: i < chunks, body,
        (tf.constant(0), tf.zeros([1, vocab_size], tf.float32), *state),
        shape_invariants=(tf.TensorShape([]), tf.TensorShape([None, vocab_size]),
                          *state_shapes))
    return log_probs, state


def decode(forward, state, ids, *, chunk_len, num_tokens, num_samples, seed, sampler_index,
           params, exclude_ids, samplers, vocab_size, state_shapes, step_offset=0,
           keep_log_probs=False):
    """The decoding loop, in a graph (see the module docstring).

    Args:
        forward: (ids int32 [B, T], state list) -> (log-probs [B, V] of the
            token after the last position, the new state list).
        state: the state the prompt starts from, for one row.
        ids: int32 [L] prompt ids (L >= 1).
        chunk_len, num_tokens, num_samples: int32 scalars (>= 1).
        seed, step_offset: int64 scalars; row r, step i draws with
            (seed + r, step_offset + i).
        sampler_index: int32 scalar, the sampler of `samplers` to run.
        params: float32 [P], its parameters (`Sampler.from_vector`).
        exclude_ids: int32 [K], never drawn.
        samplers: tuple of `Sampler` classes (the branches).
        vocab_size: V; state_shapes: TensorShapes the state keeps (batch free).
        keep_log_probs: bool scalar: also return every step's log-probs.

    Returns:
        (int32 [B, N] tokens, float32 [B, N, V] log-probs each token was
        drawn from before exclusion and sampling; [B, N, 0] without
        `keep_log_probs`).
    """
    int64 = tf.int64
    checks = [
        tf.debugging.assert_greater_equal(num_tokens, 1, message="num_tokens must be >= 1"),
        tf.debugging.assert_greater_equal(num_samples, 1, message="num_samples must be >= 1"),
        tf.debugging.assert_greater_equal(chunk_len, 1, message="chunk_len must be >= 1"),
        tf.debugging.assert_greater_equal(seed, tf.constant(0, int64), message="seed must be >= 0"),
        tf.debugging.assert_greater_equal(tf.size(ids), 1, message="the prompt is empty"),
        *sampler_checks(samplers, sampler_index, params)]
    with tf.control_dependencies(checks):
        ids = tf.identity(ids)
    log_probs, state = _prefill(forward, ids, state, chunk_len, vocab_size, state_shapes)
    # The prompt ran once for one row; the rows only differ from here on.
    log_probs = tf.repeat(log_probs, num_samples, axis=0)  # [B, V]
    state = [tf.repeat(s, num_samples, axis=0) for s in state]
    rows = tf.cast(seed, int64) + tf.range(tf.cast(num_samples, int64), dtype=int64)  # [B]
    width = tf.where(keep_log_probs, vocab_size, 0)
    tokens = tf.TensorArray(tf.int32, size=num_tokens)
    dists = tf.TensorArray(tf.float32, size=num_tokens, element_shape=[None, None],
                           infer_shape=False)

    def step_fn(step, log_probs, tokens, dists, *state):
        seeds = tf.stack([rows, tf.fill(tf.shape(rows), tf.cast(step_offset, int64)
                                        + tf.cast(step, int64))], axis=1)  # [B, 2]
        token = draw(samplers, sampler_index, params, mask_tokens(log_probs, exclude_ids),
                     seeds)  # [B]
        tokens, dists = tokens.write(step, token), dists.write(step, log_probs[:, :width])

        def advance():
            new_log_probs, new_state = forward(token[:, None], list(state))
            return tf.cast(new_log_probs, tf.float32), list(new_state)

        log_probs, state = tf.cond(step + 1 < num_tokens, advance,
                                   lambda: (log_probs, [tf.identity(s) for s in state]))
        return (step + 1, log_probs, tokens, dists, *state)

    _, _, tokens, dists, *_ = tf.while_loop(
        lambda step, *_: step < num_tokens, step_fn,
        (tf.constant(0), log_probs, tokens, dists, *state),
        shape_invariants=(tf.TensorShape([]), tf.TensorShape([None, vocab_size]), None, None,
                          *state_shapes))
    return (tf.transpose(tokens.stack()),  # [B, N]
            tf.transpose(dists.stack(), [1, 0, 2]))  # [B, N, V or 0]


class CompiledDecoding:
    """`decode` compiled for one language model and memory length.

    Args:
        model: a built language model (model/interface.py), run in evaluation mode.
        mem_len: int >= 0, memory positions kept.
        jit_compile: compile the forward pass with XLA.
    """

    def __init__(self, model, mem_len, jit_compile=False):
        self.model = model
        self.mem_len = int(mem_len)
        self.state_spec = model.state_signature()  # batch (and memory length) free
        self.forward = tf.function(
            self._forward_impl, input_signature=[tf.TensorSpec([None, None], tf.int32),
                                                 self.state_spec],
            jit_compile=bool(jit_compile) or None)
        self._loops = {}  # tuple of registered Sampler classes -> tf.function

    def _forward_impl(self, ids, state):
        """[B, T], state -> (next-token log-probs [B, V] after the last position, new state)."""
        hidden, new_state = self.model(ids, state, training=False, mem_len=self.mem_len)
        return self.model.log_probs(hidden[:, -1:])[:, 0], new_state

    def loop(self, samplers=None):
        """The compiled loop over `samplers` (default: the registered ones), made once."""
        samplers = registered() if samplers is None else tuple(samplers)
        if samplers not in self._loops:
            scalar = tf.TensorSpec([], tf.int32)
            signature = [self.state_spec, tf.TensorSpec([None], tf.int32), scalar, scalar,
                         scalar, tf.TensorSpec([], tf.int64), tf.TensorSpec([], tf.int64),
                         scalar, tf.TensorSpec([None], tf.float32),
                         tf.TensorSpec([None], tf.int32), tf.TensorSpec([], tf.bool)]
            shapes = [tf.TensorShape(spec.shape) for spec in self.state_spec]

            def run(state, ids, chunk_len, num_tokens, num_samples, seed, step_offset, index,
                    params, exclude, keep):
                return decode(self.forward, state, ids, chunk_len=chunk_len,
                              num_tokens=num_tokens, num_samples=num_samples, seed=seed,
                              sampler_index=index, params=params, exclude_ids=exclude,
                              samplers=samplers, vocab_size=int(self.model.vocab_size),
                              state_shapes=shapes, step_offset=step_offset,
                              keep_log_probs=keep)

            self._loops[samplers] = tf.function(run, input_signature=signature,
                                                autograph=False)
        return self._loops[samplers]

    def tracing_count(self):
        """Traces of the compiled loops (1 per set of registered samplers used)."""
        return sum(fn.experimental_get_tracing_count() for fn in self._loops.values())

    def run(self, ids, num_tokens, sampler, *, state=None, chunk_len, num_samples=1, seed=0,
            step_offset=0, exclude_ids=(), keep_log_probs=False):
        """Runs the compiled loop with a `Sampler` instance of a registered class.

        Returns:
            (int32 [B, N] tokens, float32 [B, N, V] or [B, N, 0] log-probs), tensors.
        """
        samplers = registered()
        if type(sampler) not in samplers:
            raise SamplerError(f"sampler={sampler.name!r} is not registered "
                               "(samplers.registry.register_sampler)")
        state = self.model.initial_state(1, 0) if state is None else state
        return self.loop(samplers)(
            state, tf.constant(np.asarray(ids, np.int32).reshape(-1)), tf.constant(chunk_len),
            tf.constant(num_tokens), tf.constant(num_samples), tf.constant(seed, tf.int64),
            tf.constant(step_offset, tf.int64), tf.constant(samplers.index(type(sampler))),
            tf.constant(sampler.vector(), tf.float32, shape=[len(sampler.params)]),
            tf.constant(np.asarray(exclude_ids, np.int32).reshape(-1)),
            tf.constant(bool(keep_log_probs)))
