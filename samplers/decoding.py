"""The one decoding loop: a compiled `tf.while_loop` with the model's state as the cache.

`decode` runs inside a graph (a `tf.function` or a SavedModel signature):
the prompt once, in chunks of `chunk_len` tokens carrying the state, then
per new token (`sample_steps`): the repetition penalty (`penalize`), the
excluded ids set to -inf (`mask.mask_tokens`), one draw by the chosen
sampler (`tf.switch_case` over the registered `Sampler` classes, each
reading its parameters from one float32 vector), and one forward pass of
length 1 over the state (none after the last token). Row r of the B =
num_samples rows draws step i with the stateless seed `(seed + r,
step_offset + i)`. A row ends at its first stop id (not part of its tokens)
or after its tokens; the loop ends early once every row has ended.

`decode_prompts` runs P prompts of different lengths as one batch and
draws, for prompt p, the tokens `decode` draws for it alone with seed
`seed + p`: each prompt runs alone until the model's state has the shapes
it keeps (a full memory, `join_after_of`), then the rows run together (the
model takes no padding mask, so only equal states can share a forward pass).

`CompiledDecoding` wraps both for a language model (model/interface.py) and
a memory length: a compiled forward pass and the compiled loops, each traced
once per set of registered samplers whatever the prompt, chunk, batch or
memory length (ids `[B, None]`, the state with `state_signature()`'s relaxed
shapes). `serving.decoder.Decoder` (generate.py, the Python API), the
SavedModel's generate signatures (serving/export.py, with its own forward)
and the trainer's evaluation samples (training/report/samples.py) all run
these loops.

Size glossary: B rows, T tokens of a forward pass, V vocabulary, N new
tokens, L prompt tokens, P prompts (or sampler parameters in `params`),
S stop ids, J rows that run together.
"""

import dataclasses

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


def penalize(log_probs, seen, penalty):
    """Repetition penalty: the log-probabilities of the ids already seen (the prompt's and
    the generated ones) multiplied by `penalty` (> 1 makes them less likely; they are <= 0),
    then normalised again. `penalty` 1 leaves `log_probs` unchanged, bit for bit.

    Args:
        log_probs: float32 [B, V]; seen: bool [B, V]; penalty: float32 scalar (> 0).
    """
    def apply():
        return tf.nn.log_softmax(tf.where(seen, log_probs * penalty, log_probs))

    return tf.cond(tf.equal(penalty, 1.0), lambda: tf.identity(log_probs), apply)


def seen_ids(ids, vocab_size):
    """bool [1, V]: which ids occur in int32 `ids` [L]."""
    hits = tf.scatter_nd(ids[:, None], tf.ones_like(ids), [vocab_size]) > 0
    return hits[None, :]


@dataclasses.dataclass
class Options:
    """What every row's draws share: the sampler and its parameters, the ids never drawn,
    the ids that end a row, the repetition penalty.

    Attributes:
        samplers: tuple of `Sampler` classes (the branches); index: int32 scalar,
            the one to run; params: float32 [P], its parameters.
        exclude_ids: int32 [K], never drawn. stop_ids: int32 [S], end a row
            (not part of its continuation). penalty: float32 scalar (1: none).
        vocab_size: V. state_shapes: TensorShapes the state keeps (batch free).
        keep_log_probs: bool scalar: also return every step's log-probs.
    """

    samplers: tuple
    index: object
    params: object
    vocab_size: int
    state_shapes: list
    exclude_ids: object = dataclasses.field(default_factory=lambda: tf.zeros([0], tf.int32))
    stop_ids: object = dataclasses.field(default_factory=lambda: tf.zeros([0], tf.int32))
    penalty: object = 1.0
    keep_log_probs: object = False


def sample_steps(forward, log_probs, state, seen, *, rows, offsets, limits, num_steps,
                 feed_last, options):
    """Draws up to `num_steps` tokens for B rows, each in its own stream of seeds.

    Step i of row r draws with the stateless seed (rows[r], offsets[r] + i) from
    the row's log-probabilities after the repetition penalty and the excluded
    ids; then the drawn tokens are fed (one forward pass of length 1) unless it
    was the last step and not `feed_last`. A row ends at its first stop id or
    after limits[r] tokens; the loop ends when every row has ended.

    Args:
        forward: (ids int32 [B, T], state list) -> (log-probs [B, V], new state).
        log_probs: float32 [B, V], the distribution of the next token; state:
            the state it came with; seen: bool [B, V], the ids seen so far.
        rows, offsets: int64 [B]. limits: int32 [B], tokens each row may draw.
        num_steps: int32 scalar (>= max(limits) draws nothing more).
        feed_last: bool scalar, also feed the last drawn token.
        options: `Options`.

    Returns:
        dict "tokens" int32 [B, n] (n <= num_steps steps ran), "lengths" int32 [B]
        (tokens of each row before its stop or limit), "done" bool [B],
        "log_probs" [B, n, V] or [B, n, 0] (the model's, before the penalty,
        exclusion and sampling), and the loop's end: "next_log_probs", "state", "seen".
    """
    int64 = tf.int64
    vocab = options.vocab_size
    width = tf.where(options.keep_log_probs, vocab, 0)
    tokens = tf.TensorArray(tf.int32, size=0, dynamic_size=True, element_shape=[None])
    dists = tf.TensorArray(tf.float32, size=0, dynamic_size=True, element_shape=[None, None],
                           infer_shape=False)
    lengths = tf.maximum(limits, 0)
    done = lengths <= 0

    def step_fn(step, log_probs, seen, done, lengths, tokens, dists, *state):
        seeds = tf.stack([rows, offsets + tf.cast(step, int64)], axis=1)  # [B, 2]
        ready = mask_tokens(penalize(log_probs, seen, options.penalty), options.exclude_ids)
        token = draw(options.samplers, options.index, options.params, ready, seeds)  # [B]
        tokens, dists = tokens.write(step, token), dists.write(step, log_probs[:, :width])
        seen = tf.logical_or(seen, tf.one_hot(token, vocab, dtype=tf.int32) > 0)
        stop = tf.reduce_any(tf.equal(token[:, None], options.stop_ids[None, :]), axis=1)
        lengths = tf.where(tf.logical_and(stop, tf.logical_not(done)), step, lengths)
        done = done | stop | (step + 1 >= limits)

        def advance():
            new_log_probs, new_state = forward(token[:, None], list(state))
            return tf.cast(new_log_probs, tf.float32), list(new_state)

        go_on = tf.logical_and(tf.logical_or(step + 1 < num_steps, feed_last),
                               tf.logical_not(tf.reduce_all(done)))
        log_probs, state = tf.cond(go_on, advance,
                                   lambda: (log_probs, [tf.identity(s) for s in state]))
        return (step + 1, log_probs, seen, done, lengths, tokens, dists, *state)

    ran, log_probs, seen, done, lengths, tokens, dists, *state = tf.while_loop(
        lambda step, log_probs, seen, done, *_: tf.logical_and(
            step < num_steps, tf.logical_not(tf.reduce_all(done))), step_fn,
        (tf.constant(0), log_probs, seen, done, lengths, tokens, dists, *state),
        shape_invariants=(tf.TensorShape([]), tf.TensorShape([None, vocab]),
                          tf.TensorShape([None, vocab]), tf.TensorShape([None]),
                          tf.TensorShape([None]), None, None, *options.state_shapes))
    rows_count = tf.shape(rows)[0]
    tokens = tf.cond(ran > 0, lambda: tf.transpose(tokens.stack()),
                     lambda: tf.zeros([rows_count, 0], tf.int32))  # [B, n]
    dists = tf.cond(ran > 0, lambda: tf.transpose(dists.stack(), [1, 0, 2]),
                    lambda: tf.zeros([rows_count, 0, width], tf.float32))
    return {"tokens": tokens, "lengths": tf.minimum(lengths, ran), "done": done,
            "log_probs": dists, "next_log_probs": log_probs, "state": state, "seen": seen}


def decode(forward, state, ids, *, chunk_len, num_tokens, num_samples, seed, sampler_index,
           params, exclude_ids, samplers, vocab_size, state_shapes, step_offset=0,
           keep_log_probs=False, stop_ids=None, penalty=1.0, history_ids=None):
    """The decoding loop for one prompt, in a graph (see the module docstring).

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
        stop_ids: int32 [S] ending a row (None: none); penalty: float32 scalar,
            the repetition penalty (`penalize`; 1: none).
        history_ids: int32 [H], the ids the penalty counts as seen before the
            first draw (None: `ids`; a continued generation passes its prompt
            and what it generated).

    Returns:
        `sample_steps`' dict: "tokens" int32 [B, n] (n <= N: every row stopped),
        "lengths" int32 [B], "log_probs" float32 [B, n, V] each token was drawn
        from before the penalty, exclusion and sampling ([B, n, 0] without
        `keep_log_probs`), "state" after the prompt and every token but the last.
    """
    int64 = tf.int64
    checks = [
        tf.debugging.assert_greater_equal(num_tokens, 1, message="num_tokens must be >= 1"),
        tf.debugging.assert_greater_equal(num_samples, 1, message="num_samples must be >= 1"),
        tf.debugging.assert_greater_equal(chunk_len, 1, message="chunk_len must be >= 1"),
        tf.debugging.assert_greater_equal(seed, tf.constant(0, int64), message="seed must be >= 0"),
        tf.debugging.assert_greater_equal(tf.size(ids), 1, message="the prompt is empty"),
        tf.debugging.assert_greater(penalty, 0.0, message="repetition_penalty must be > 0"),
        *sampler_checks(samplers, sampler_index, params)]
    with tf.control_dependencies(checks):
        ids = tf.identity(ids)
    options = Options(samplers, sampler_index, params, vocab_size, state_shapes, exclude_ids,
                      tf.zeros([0], tf.int32) if stop_ids is None else stop_ids,
                      tf.cast(penalty, tf.float32), keep_log_probs)
    log_probs, state = _prefill(forward, ids, state, chunk_len, vocab_size, state_shapes)
    # The prompt ran once for one row; the rows only differ from here on.
    log_probs = tf.repeat(log_probs, num_samples, axis=0)  # [B, V]
    state = [tf.repeat(s, num_samples, axis=0) for s in state]
    seen = tf.repeat(seen_ids(ids if history_ids is None else history_ids, vocab_size),
                     num_samples, axis=0)  # [B, V]
    rows = tf.cast(seed, int64) + tf.range(tf.cast(num_samples, int64), dtype=int64)  # [B]
    return sample_steps(forward, log_probs, state, seen, rows=rows,
                        offsets=tf.fill(tf.shape(rows), tf.cast(step_offset, int64)),
                        limits=tf.fill(tf.shape(rows), num_tokens), num_steps=num_tokens,
                        feed_last=tf.constant(False), options=options)


def _merge_rows(values):
    """[J, 1, ...] gathered per-prompt values -> [J, ...]."""
    return tf.reshape(values, tf.concat([[-1], tf.shape(values)[2:]], 0))


def _run_together(forward, kept, joined, tokens, lengths, solo, num_tokens, seed, options):
    """`decode_prompts`' second phase: the rows `joined` [J] that have not ended, their
    kept (log-probs, seen, state) merged into one batch, each drawing its remaining
    tokens with its own seeds from its own step (`solo` [P] drawn alone).

    Returns:
        (tokens [P, max N] with the new tokens placed after each row's first ones,
        lengths [P]).
    """
    log_probs, seen, *rows_state = [_merge_rows(k.gather(joined)) for k in kept]
    first = tf.gather(solo, joined)  # [J]
    limits = tf.gather(num_tokens, joined) - first
    out = sample_steps(forward, log_probs, rows_state, seen,
                       rows=seed + tf.cast(joined, tf.int64),
                       offsets=tf.cast(first, tf.int64), limits=limits,
                       num_steps=tf.reduce_max(limits), feed_last=tf.constant(False),
                       options=options)
    new = out["tokens"]  # [J, n]
    steps = tf.range(tf.shape(new)[1])
    keep = steps[None, :] < limits[:, None]  # [J, n]
    where = tf.stack([tf.broadcast_to(joined[:, None], tf.shape(new)),
                      first[:, None] + steps[None, :]], axis=-1)  # [J, n, 2]
    placed = tf.tensor_scatter_nd_update(tokens, tf.boolean_mask(where, keep),
                                         tf.boolean_mask(new, keep))
    return placed, tf.tensor_scatter_nd_update(lengths, joined[:, None],
                                               first + out["lengths"])


def decode_prompts(forward, state, ids, lengths, *, chunk_len, num_tokens, seed, options,
                   join_after):
    """The decoding loop for P prompts of any lengths, one row each, in a graph.

    Prompt p draws exactly the tokens `decode` draws for it alone with seed
    `seed + p` (step i with the stateless seed (seed + p, i)). The model takes
    no padding mask, so rows of unequal states cannot share a forward pass:
    each prompt runs alone (its prompt, then its first tokens) until its state
    has the shapes every long-enough state has (`join_after` tokens: a
    Transformer-XL's memory is full), then the rows that have not ended run
    together, each with its own seeds and step count.

    Args:
        forward, state: as `decode` (`state` for one row).
        ids: int32 [sum L], the prompts' ids one after another; lengths: int32
            [P] (each >= 1).
        chunk_len: int32 scalar; num_tokens: int32 [P], tokens of each prompt.
        seed: int64 scalar. options: `Options` (not keep_log_probs).
        join_after: int, the tokens after which a state has its final shapes;
            None: never (every prompt runs alone).

    Returns:
        dict "tokens" int32 [P, max N] (-1 after each row's length), "lengths" int32 [P].
    """
    int64 = tf.int64
    count = tf.size(lengths)
    starts = tf.cumsum(lengths, exclusive=True)
    widest = tf.reduce_max(tf.concat([num_tokens, [0]], 0))
    alone = tf.TensorArray(tf.int32, size=count, element_shape=[None])
    kept = [tf.TensorArray(dtype, size=count, element_shape=tf.TensorShape(None),
                           infer_shape=False)
            for dtype in (tf.float32, tf.bool, *(s.dtype for s in state))]

    def one(p, alone, solo, alone_lengths, joins, *kept):
        prompt = ids[starts[p]:starts[p] + lengths[p]]
        log_probs, row_state = _prefill(forward, prompt, state, chunk_len, options.vocab_size,
                                        options.state_shapes)
        steps = num_tokens[p] if join_after is None else tf.minimum(
            num_tokens[p], tf.maximum(0, join_after - lengths[p]))
        out = sample_steps(forward, log_probs, row_state, seen_ids(prompt, options.vocab_size),
                           rows=tf.cast(seed + tf.cast(p, int64), int64)[None],
                           offsets=tf.zeros([1], int64), limits=num_tokens[p][None],
                           num_steps=steps, feed_last=steps < num_tokens[p], options=options)
        row = tf.pad(out["tokens"][0], [[0, widest - tf.shape(out["tokens"])[1]]],
                     constant_values=-1)
        values = [out["next_log_probs"], out["seen"], *out["state"]]
        kept = [k.write(p, v) for k, v in zip(kept, values)]
        return (p + 1, alone.write(p, row), solo.write(p, steps),
                alone_lengths.write(p, out["lengths"][0]),
                joins.write(p, tf.logical_not(out["done"][0])), *kept)

    solo = tf.TensorArray(tf.int32, size=count)
    alone_lengths = tf.TensorArray(tf.int32, size=count)
    joins = tf.TensorArray(tf.bool, size=count)
    _, alone, solo, alone_lengths, joins, *kept = tf.while_loop(
        lambda p, *_: p < count, one,
        (tf.constant(0), alone, solo, alone_lengths, joins, *kept))
    tokens, solo, lengths_out = alone.stack(), solo.stack(), alone_lengths.stack()
    tokens = tf.reshape(tokens, [count, widest])
    joined = tf.cast(tf.where(joins.stack())[:, 0], tf.int32)  # [J]

    tokens, lengths_out = tf.cond(
        tf.size(joined) > 0,
        lambda: _run_together(forward, kept, joined, tokens, lengths_out, solo, num_tokens,
                              seed, options),
        lambda: (tokens, lengths_out))
    positions = tf.range(widest)[None, :]
    tokens = tf.where(positions < lengths_out[:, None], tokens, -1)
    return {"tokens": tokens, "lengths": lengths_out}


class CompiledDecoding:
    """`decode` and `decode_prompts` compiled for one language model and memory length.

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
        self._loops = {}  # (kind, tuple of registered Sampler classes) -> tf.function
        self._join_after = ()  # not measured yet

    def _forward_impl(self, ids, state):
        """[B, T], state -> (next-token log-probs [B, V] after the last position, new state)."""
        hidden, new_state = self.model(ids, state, training=False, mem_len=self.mem_len)
        return self.model.log_probs(hidden[:, -1:])[:, 0], new_state

    @property
    def join_after(self):
        """Tokens after which the model's state keeps its shapes (`join_after_of`)."""
        if self._join_after == ():
            self._join_after = join_after_of(self.forward, self.model.initial_state(1, 0),
                                             self.mem_len)
        return self._join_after

    def _shapes(self):
        return [tf.TensorShape(spec.shape) for spec in self.state_spec]

    def loop(self, samplers=None):
        """The compiled one-prompt loop over `samplers` (default: the registered ones)."""
        samplers = registered() if samplers is None else tuple(samplers)
        key = ("one", samplers)
        if key not in self._loops:
            scalar = tf.TensorSpec([], tf.int32)
            signature = [self.state_spec, tf.TensorSpec([None], tf.int32), scalar, scalar,
                         scalar, tf.TensorSpec([], tf.int64), tf.TensorSpec([], tf.int64),
                         scalar, tf.TensorSpec([None], tf.float32),
                         tf.TensorSpec([None], tf.int32), tf.TensorSpec([], tf.bool),
                         tf.TensorSpec([None], tf.int32), tf.TensorSpec([], tf.float32),
                         tf.TensorSpec([None], tf.int32)]

            def run(state, ids, chunk_len, num_tokens, num_samples, seed, step_offset, index,
                    params, exclude, keep, stop_ids, penalty, history):
                out = decode(self.forward, state, ids, chunk_len=chunk_len,
                             num_tokens=num_tokens, num_samples=num_samples, seed=seed,
                             sampler_index=index, params=params, exclude_ids=exclude,
                             samplers=samplers, vocab_size=int(self.model.vocab_size),
                             state_shapes=self._shapes(), step_offset=step_offset,
                             keep_log_probs=keep, stop_ids=stop_ids, penalty=penalty,
                             history_ids=history)
                return {key: out[key] for key in ("tokens", "lengths", "log_probs", "state")}

            self._loops[key] = tf.function(run, input_signature=signature, autograph=False)
        return self._loops[key]

    def prompts_loop(self, samplers=None):
        """The compiled many-prompt loop (`decode_prompts`) over `samplers`."""
        samplers = registered() if samplers is None else tuple(samplers)
        key = ("many", samplers)
        if key not in self._loops:
            scalar = tf.TensorSpec([], tf.int32)
            vector = tf.TensorSpec([None], tf.int32)
            signature = [vector, vector, scalar, vector, tf.TensorSpec([], tf.int64), scalar,
                         tf.TensorSpec([None], tf.float32), vector, vector,
                         tf.TensorSpec([], tf.float32)]
            join_after = self.join_after

            def run(ids, lengths, chunk_len, num_tokens, seed, index, params, exclude,
                    stop_ids, penalty):
                options = Options(samplers, index, params, int(self.model.vocab_size),
                                  self._shapes(), exclude, stop_ids, penalty)
                checks = [*sampler_checks(samplers, index, params),
                          tf.debugging.assert_greater(penalty, 0.0,
                                                      message="repetition_penalty must be > 0")]
                with tf.control_dependencies(checks):
                    ids = tf.identity(ids)
                return decode_prompts(self.forward, self.model.initial_state(1, 0), ids,
                                      lengths, chunk_len=chunk_len, num_tokens=num_tokens,
                                      seed=seed, options=options, join_after=join_after)

            self._loops[key] = tf.function(run, input_signature=signature, autograph=False)
        return self._loops[key]

    def tracing_count(self):
        """Traces of the compiled loops (1 per loop and set of registered samplers used)."""
        return sum(fn.experimental_get_tracing_count() for fn in self._loops.values())

    @staticmethod
    def _sampler_inputs(sampler):
        samplers = registered()
        if type(sampler) not in samplers:
            raise SamplerError(f"sampler={sampler.name!r} is not registered "
                               "(samplers.registry.register_sampler)")
        return samplers, (tf.constant(samplers.index(type(sampler))),
                          tf.constant(sampler.vector(), tf.float32, shape=[len(sampler.params)]))

    def run(self, ids, num_tokens, sampler, *, state=None, chunk_len, num_samples=1, seed=0,
            step_offset=0, exclude_ids=(), keep_log_probs=False, stop_ids=(), penalty=1.0,
            history_ids=None):
        """Runs the compiled one-prompt loop with a `Sampler` instance of a registered class.

        Returns:
            dict of tensors: "tokens" int32 [B, n] (n <= num_tokens: every row
            stopped), "lengths" int32 [B], "log_probs" float32 [B, n, V] or
            [B, n, 0], "state" (after the prompt and every token but the last).
        """
        samplers, (index, params) = self._sampler_inputs(sampler)
        state = self.model.initial_state(1, 0) if state is None else state
        ids = np.asarray(ids, np.int32).reshape(-1)
        history = ids if history_ids is None else np.asarray(history_ids, np.int32).reshape(-1)
        return self.loop(samplers)(
            state, tf.constant(ids), tf.constant(chunk_len),
            tf.constant(num_tokens), tf.constant(num_samples), tf.constant(seed, tf.int64),
            tf.constant(step_offset, tf.int64), index, params,
            tf.constant(np.asarray(exclude_ids, np.int32).reshape(-1)),
            tf.constant(bool(keep_log_probs)), _ids(stop_ids),
            tf.constant(penalty, tf.float32), tf.constant(history))

    def run_prompts(self, prompts, num_tokens, sampler, *, chunk_len, seed=0, exclude_ids=(),
                    stop_ids=(), penalty=1.0):
        """Runs the compiled many-prompt loop: prompt p (a non-empty id sequence) draws
        num_tokens[p] tokens with seed `seed + p`.

        Returns:
            dict of tensors "tokens" int32 [P, max N] (-1 after each row's end),
            "lengths" int32 [P].
        """
        samplers, (index, params) = self._sampler_inputs(sampler)
        lengths = np.asarray([len(p) for p in prompts], np.int32)
        flat = np.concatenate([np.asarray(p, np.int32).reshape(-1) for p in prompts])
        return self.prompts_loop(samplers)(
            tf.constant(flat), tf.constant(lengths), tf.constant(chunk_len),
            tf.constant(np.asarray(num_tokens, np.int32).reshape(-1)),
            tf.constant(seed, tf.int64), index, params, _ids(exclude_ids), _ids(stop_ids),
            tf.constant(penalty, tf.float32))


def _ids(values):
    return tf.constant(np.asarray(values, np.int32).reshape(-1), tf.int32)


def join_after_of(forward, state, mem_len):
    """Tokens after which `forward`'s state has the shapes it keeps, or None.

    A Transformer-XL's memories (and SHA-RNN's attention memory) grow to
    `mem_len` positions and keep them: after max(1, mem_len) tokens every
    state has the same shapes, which two forward passes check (max(1,
    mem_len) tokens, then one more). None when the shapes still change.
    """
    length = max(1, int(mem_len))
    _, full = forward(tf.zeros([1, length], tf.int32), state)
    _, more = forward(tf.zeros([1, 1], tf.int32), full)
    same = all(a.shape == b.shape for a, b in zip(full, more))
    return length if same else None
