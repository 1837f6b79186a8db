"""The cached decoder: a model's state as the cache, compiled once per (model, mem_len).

Works through the language-model interface (model/interface.py) only: the
model's state (Transformer-XL memories, Dai et al. 2019, arXiv 1901.02860;
SHA-RNN's LSTM states and attention memory) is the cache. The prompt runs
once, in chunks of at most `chunk_len` tokens carrying the state, then each
new token costs one forward pass of length 1 over `[memory; token]`. With
`mem_len >= prompt + generated tokens` this equals a full recomputation over
the context; with a shorter memory it is the segment recurrence the run was
evaluated with (a loaded run defaults to `chunk_len = seq_len`,
`mem_len = eval_mem_len`).

Retracing: the compiled functions take ids `[B, None]` and the state with the
relaxed shapes of `model.state_signature()` (memories `[B, None, D]`), so each
is traced once per `Decoder`, whatever the prompt, chunk or batch size and
while the memory grows from 0 to `mem_len`. Memories padded to `mem_len` from
the start would keep shapes fixed, but need an attention mask the model does
not take (zero padding is attended to and changes the result).

Sampling is `samplers.sampler.sample_tokens` (excluded ids, temperature, top-k,
top-p, one Gumbel-max draw per row with the stateless seed `(seed + row, step)`,
or greedy). The decoder works on ids: text callers pass the tokenizer's
`unknown_ids()` as `exclude_ids` unless the user allows the unknown token.

Size glossary:
    B: rows (samples) generated together.    T: tokens of one forward pass.
    M: memory length (<= mem_len).           D: model width (d_model).
    V: vocabulary size.                      N: generated tokens.
"""

import secrets

import numpy as np
import tensorflow as tf

from model.interface import check_model
from samplers.sampler import sample_tokens
from serving.errors import GenerationError


def check_sampling_args(num_tokens=1, temperature=1.0, top_k=0, top_p=1.0, num_samples=1):
    """Raises GenerationError (a ValueError) whose message starts with the bad argument."""
    integer = (int, np.integer)
    checks = (
        ("num_tokens", num_tokens, isinstance(num_tokens, integer) and num_tokens >= 1, ">= 1"),
        ("num_samples", num_samples, isinstance(num_samples, integer) and num_samples >= 1,
         ">= 1"),
        ("temperature", temperature, float(temperature) > 0 and np.isfinite(temperature),
         "> 0 (greedy decoding takes the argmax)"),
        ("top_k", top_k, isinstance(top_k, integer) and top_k >= 0, ">= 0 (0 keeps all tokens)"),
        ("top_p", top_p, 0.0 < float(top_p) <= 1.0, "in (0, 1] (1 keeps all tokens)"),
    )
    for name, value, ok, condition in checks:
        if not ok:
            raise GenerationError(f"{name}={value!r} must be {condition}")


class Decoder:
    """Compiled cached forward passes and sampling for one model and `mem_len`.

    Create one per (model, mem_len) and reuse it: each compiled function is
    traced once (see the module docstring); `tracing_counts()` reports it.

    Args:
        model: a built language model (model/interface.py); evaluation is
            deterministic: no dropout, no Gumbel noise in a supernet.
        mem_len: int >= 0, memory positions kept per attention memory; None:
            the model's config `mem_len`.
        jit_compile: compile the forward pass with XLA (model/xla.py). XLA
            compiles once per input shape, so each prompt chunk length and
            each memory length while the memory fills (the first `mem_len`
            tokens) compiles anew: worth it for long generations only.
    """

    def __init__(self, model, mem_len=None, jit_compile=False):
        self.model = check_model(model)
        self.mem_len = int(model.mem_len if mem_len is None else mem_len)
        if self.mem_len < 0:
            raise GenerationError(f"mem_len={self.mem_len} must be >= 0")
        ids = tf.TensorSpec([None, None], tf.int32)  # [B, T]
        state = model.state_signature()  # batch (and memory length) free
        options = [tf.TensorSpec([None, 2], tf.int64), tf.TensorSpec([], tf.float32),
                   tf.TensorSpec([], tf.int32), tf.TensorSpec([], tf.float32),
                   tf.TensorSpec([], tf.bool), tf.TensorSpec([None], tf.int32)]
        # seeds, temperature, top_k, top_p, greedy, exclude_ids
        # Two compiled functions, not a fused forward + sample step: the model
        # is traced once (tracing costs seconds), sampling alone is cheap.
        self._forward = tf.function(self._forward_impl, input_signature=[ids, state],
                                    jit_compile=bool(jit_compile) or None)
        self._sample = tf.function(
            sample_tokens, input_signature=[tf.TensorSpec([None, None], tf.float32), *options])

    def _forward_impl(self, ids, state):
        """[B, T], state -> (next-token log-probs [B, V] after the last position, new state)."""
        hidden, new_state = self.model(ids, state, training=False, mem_len=self.mem_len)
        return self.model.log_probs(hidden[:, -1:])[:, 0], new_state

    def forward(self, ids, state):
        """One compiled forward pass carrying the state (what `prefill` and `generate` run).

        Args:
            ids: int [B, T] token ids (T >= 1).
            state: the model's state for B rows, e.g. `model.initial_state(B, 0)`
                (empty memories) or the state returned by the previous call.

        Returns:
            (float32 [B, V] log-probs of the token after the last position,
            the new state: memories [B, min(M + T, mem_len), D]).
        """
        return self._forward(tf.convert_to_tensor(ids, tf.int32), state)

    def tracing_counts(self):
        """dict name -> number of traces of each compiled function."""
        return {name: fn.experimental_get_tracing_count()
                for name, fn in (("forward", self._forward), ("sample", self._sample))}

    def prefill(self, prompt_ids, chunk_len=None):
        """Runs the prompt once, in chunks carrying the memory.

        Args:
            prompt_ids: non-empty sequence of ids in [0, V).
            chunk_len: int >= 1, tokens per forward pass; None: max(1, mem_len).

        Returns:
            (log_probs [1, V] of the token after the prompt, the model state
            after it: e.g. memories [1, min(len, mem_len), D]).
        """
        ids = _check_ids(prompt_ids, self.model.vocab_size)
        chunk_len = max(1, self.mem_len) if chunk_len is None else int(chunk_len)
        if chunk_len < 1:
            raise GenerationError(f"chunk_len={chunk_len} must be >= 1")
        state = self.model.initial_state(1, 0)  # empty memories
        for start in range(0, len(ids), chunk_len):
            log_probs, state = self._forward(tf.constant(ids[None, start:start + chunk_len]),
                                             state)
        return log_probs, state

    def generate(self, prompt_ids, num_tokens, *, num_samples=1, temperature=1.0, top_k=0,
                 top_p=1.0, greedy=False, seed=None, chunk_len=None, exclude_ids=(),
                 return_log_probs=False):
        """Generates `num_samples` continuations of one prompt.

        Args:
            prompt_ids: non-empty sequence of ids in [0, V) (see
                `encode_prompt` for an empty text prompt).
            num_tokens: int >= 1, tokens to generate per sample.
            num_samples: int >= 1, rows generated together; row r is drawn
                with seed `seed + r`.
            temperature, top_k, top_p, greedy: see `sample_tokens`.
            seed: int >= 0; None draws a random one.
            chunk_len: prompt tokens per forward pass (see `prefill`).
            exclude_ids: ids in [0, V) never drawn (e.g. `tokenizer.unknown_ids()`).
            return_log_probs: also return the distribution of every step.

        Returns:
            int64 [B, N] token ids; with `return_log_probs`, also float32
            [B, N, V] log-probabilities each token was drawn from (the model's,
            before the excluded ids, temperature and filtering).

        Raises:
            GenerationError: an invalid argument, named.
        """
        check_sampling_args(num_tokens, temperature, top_k, top_p, num_samples)
        seed = _check_seed(seed)
        exclude = _check_exclude(exclude_ids, self.model.vocab_size)
        log_probs, state = self.prefill(prompt_ids, chunk_len)
        # The prompt ran once for one row; the rows only differ from here on.
        log_probs = tf.repeat(log_probs, num_samples, axis=0)  # [B, V]
        state = [tf.repeat(s, num_samples, axis=0) for s in state]  # [B, ...]
        options = (tf.constant(temperature, tf.float32), tf.constant(top_k, tf.int32),
                   tf.constant(top_p, tf.float32), tf.constant(bool(greedy)), exclude)
        rows = np.arange(num_samples, dtype=np.int64) + seed

        def seeds(step):
            return tf.constant(np.stack([rows, np.full_like(rows, step)], axis=1))  # [B, 2]

        tokens, distributions = [], []
        for step in range(num_tokens):
            tokens.append(self._sample(log_probs, seeds(step), *options))  # [B]
            if return_log_probs:
                distributions.append(log_probs)
            if step + 1 < num_tokens:  # one forward of length 1 per new token
                log_probs, state = self._forward(tokens[-1][:, None], state)
        tokens = np.stack([t.numpy() for t in tokens], axis=1).astype(np.int64)  # [B, N]
        if return_log_probs:
            return tokens, np.stack([d.numpy() for d in distributions], axis=1)  # [B, N, V]
        return tokens


def _check_ids(prompt_ids, vocab_size):
    ids = np.asarray(prompt_ids, dtype=np.int64).reshape(-1)
    if ids.size == 0:
        raise GenerationError("prompt_ids is empty: start from the tokenizer's line start "
                              "(encode_prompt does this for an empty text prompt)")
    if ids.min() < 0 or ids.max() >= vocab_size:
        raise GenerationError(f"prompt_ids must be in [0, {vocab_size}) (the model's vocabulary), "
                              f"got {ids.min()}..{ids.max()}: use the run's tokenizer")
    return ids.astype(np.int32)


def _check_exclude(exclude_ids, vocab_size):
    ids = np.asarray(exclude_ids, dtype=np.int64).reshape(-1)
    if ids.size and (ids.min() < 0 or ids.max() >= vocab_size):
        raise GenerationError(f"exclude_ids must be in [0, {vocab_size}) (the model's "
                              f"vocabulary), got {ids.min()}..{ids.max()}")
    return tf.constant(ids.astype(np.int32), tf.int32)  # [K]


def _check_seed(seed):
    if seed is None:
        return secrets.randbits(62)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**62:
        raise GenerationError(f"seed={seed!r} must be an integer in [0, 2**62)")
    return int(seed)


def generate(model, prompt_ids, num_tokens, *, temperature=1.0, top_k=0, top_p=1.0, greedy=False,
             seed=None, mem_len=None, chunk_len=None, exclude_ids=()):
    """Generates one continuation with the memory cache.

    Builds (and traces) a new `Decoder` per call: reuse a `Decoder` (or
    `run.decoder()`) to generate many times.

    Args:
        model: a built language model (model/interface.py).
        prompt_ids: non-empty sequence of ids in [0, V).
        num_tokens: int >= 1.
        temperature: float > 0, divides the log-probabilities.
        top_k: int >= 0, keep the k most likely tokens (0: all).
        top_p: float in (0, 1], keep the smallest most likely set of mass >= p.
        greedy: argmax decoding (the three options above are ignored).
        seed: int >= 0 for a reproducible sample; None: random.
        mem_len: memory kept per attention memory; None: the model's mem_len.
        chunk_len: prompt tokens per forward pass; None: max(1, mem_len).
        exclude_ids: ids never drawn (e.g. the tokenizer's `unknown_ids()`).

    Returns:
        list of `num_tokens` generated ids (the prompt not included).
    """
    decoder = Decoder(model, mem_len)
    tokens = decoder.generate(prompt_ids, num_tokens, temperature=temperature, top_k=top_k,
                              top_p=top_p, greedy=greedy, seed=seed, chunk_len=chunk_len,
                              exclude_ids=exclude_ids)
    return tokens[0].tolist()
