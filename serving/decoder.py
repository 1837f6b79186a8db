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

Retracing: the compiled functions take ids `[B, None]` (the loop: `[None]`) and the state with the
relaxed shapes of `model.state_signature()` (memories `[B, None, D]`), so each
is traced once per `Decoder`, whatever the prompt, chunk or batch size and
while the memory grows from 0 to `mem_len`. Memories padded to `mem_len` from
the start would keep shapes fixed, but need an attention mask the model does
not take (zero padding is attended to and changes the result). The loop is
traced again only after the sampler registry changes (its branches are the
samplers registered when it is traced).

`generate` runs the one compiled decoding loop (`samplers.decoding`: the
prompt in chunks, then a `tf.while_loop` of one draw and one length-1
forward per token, all in one graph call). Sampling is a registered
`samplers.base.Sampler` (samplers/registry.py): the keyword options map onto
"greedy" or "sample" (excluded ids, temperature, top-k, top-p, one
Gumbel-max draw per row with the stateless seed `(seed + row, step)`), or
`sampler=` names any registered one. The decoder works on ids: text callers
pass the tokenizer's `unknown_ids()` as `exclude_ids` unless the user allows
the unknown token.

Size glossary:
    B: rows (samples) generated together.    T: tokens of one forward pass.
    M: memory length (<= mem_len).           D: model width (d_model).
    V: vocabulary size.                      N: generated tokens.
"""

import contextlib
import secrets

import numpy as np
import tensorflow as tf

from model.interface import check_model
from pardata import quiet
from samplers.base import Sampler, SamplerError
from samplers.decoding import CompiledDecoding
from samplers.registry import get_sampler, registered
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
    """Compiled cached forward passes and the compiled decoding loop for one model and `mem_len`.

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
        # The forward pass is one compiled function (traced once: tracing the model
        # costs seconds), which the compiled decoding loop calls too.
        self._decoding = CompiledDecoding(model, self.mem_len, jit_compile)
        self._ran = False  # the first generation runs with TensorFlow's notices filtered
        self._forward = self._decoding.forward

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
        """dict name -> number of traces: "forward" (the forward pass) and "generate"
        (the decoding loop; once more after the sampler registry changes)."""
        return {"forward": self._forward.experimental_get_tracing_count(),
                "generate": self._decoding.tracing_count()}

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
        chunk_len = self._chunk_len(chunk_len)
        state = self.model.initial_state(1, 0)  # empty memories
        for start in range(0, len(ids), chunk_len):
            log_probs, state = self._forward(tf.constant(ids[None, start:start + chunk_len]),
                                             state)
        return log_probs, state

    def _chunk_len(self, chunk_len):
        chunk_len = max(1, self.mem_len) if chunk_len is None else int(chunk_len)
        if chunk_len < 1:
            raise GenerationError(f"chunk_len={chunk_len} must be >= 1")
        return chunk_len

    def generate(self, prompt_ids, num_tokens, *, num_samples=1, temperature=1.0, top_k=0,
                 top_p=1.0, greedy=False, seed=None, chunk_len=None, exclude_ids=(),
                 return_log_probs=False, sampler=None, stop_ids=(), repetition_penalty=1.0):
        """Generates `num_samples` continuations of one prompt.

        Args:
            prompt_ids: non-empty sequence of ids in [0, V) (see
                `encode_prompt` for an empty text prompt).
            num_tokens: int >= 1, tokens to generate per sample.
            num_samples: int >= 1, rows generated together; row r is drawn
                with seed `seed + r`.
            temperature, top_k, top_p, greedy: see `sample_tokens` (the
                registered "greedy" or "sample" sampler).
            seed: int >= 0; None draws a random one.
            chunk_len: prompt tokens per forward pass (see `prefill`).
            exclude_ids: ids in [0, V) never drawn (e.g. `tokenizer.unknown_ids()`).
            return_log_probs: also return the distribution of every step.
            sampler: instead of the four options above, a registered sampler:
                a `samplers.base.Sampler` instance or a name (its defaults).
            stop_ids: ids that end a row (the id itself is not kept).
            repetition_penalty: > 0; the log-probabilities of ids already in
                the prompt or the row are multiplied by it (1: none;
                `samplers.decoding.penalize`).

        Returns:
            int64 [B, N] token ids, -1 after a row's stop; with
            `return_log_probs`, also float32 [B, n, V] log-probabilities each
            token was drawn from (the model's, before the penalty, the excluded
            ids, temperature and filtering), n <= N steps (fewer when every row stopped).

        Raises:
            GenerationError: an invalid argument, named.
        """
        check_sampling_args(num_tokens, temperature, top_k, top_p, num_samples)
        sampler = resolve_sampler(sampler, temperature, top_k, top_p, greedy)
        seed = _check_seed(seed)
        exclude = _check_exclude(exclude_ids, self.model.vocab_size)
        stops = _check_exclude(stop_ids, self.model.vocab_size, "stop_ids")
        penalty = check_penalty(repetition_penalty)
        ids = _check_ids(prompt_ids, self.model.vocab_size)
        with self._first_run():
            out = self._decoding.run(
                ids, num_tokens, sampler, chunk_len=self._chunk_len(chunk_len),
                num_samples=num_samples, seed=seed, exclude_ids=exclude,
                keep_log_probs=return_log_probs, stop_ids=stops, penalty=penalty)
        tokens = _padded(out["tokens"].numpy(), out["lengths"].numpy(), num_tokens)  # [B, N]
        if return_log_probs:
            return tokens, out["log_probs"].numpy()  # [B, n, V]
        return tokens

    def _first_run(self):
        """The first run builds and optimises the loop's graph: TensorFlow's notices then
        (oneDNN's int32 fallback) are filtered as at its start-up (pardata/quiet.py)."""
        if self._ran:
            return contextlib.nullcontext()
        self._ran = True
        return quiet.filtered_stderr()

    def generate_many(self, prompts, num_tokens, *, seed=None, sampler=None, chunk_len=None,
                      exclude_ids=(), stop_ids=(), repetition_penalty=1.0, batch_size=32):
        """Continues many prompts of any lengths as batches: prompt p draws the tokens
        `generate(prompts[p], num_tokens[p], seed=seed + p)` draws
        (`samplers.decoding.decode_prompts`).

        Args:
            prompts: a non-empty list of non-empty id sequences.
            num_tokens: int >= 1, or one per prompt.
            seed: int >= 0 (None: random); sampler: a registered `Sampler` or a
                name (None: "sample" at temperature 1).
            chunk_len, exclude_ids, stop_ids, repetition_penalty: as `generate`.
            batch_size: prompts per batch (bounds the memory for long lists).

        Returns:
            list of int64 arrays, each prompt's tokens (up to its stop, which is
            not included).

        Raises:
            GenerationError: an invalid argument, named.
        """
        if not isinstance(prompts, (list, tuple)) or not prompts:
            raise GenerationError("prompts must be a non-empty list of id sequences")
        counts = [num_tokens] * len(prompts) if isinstance(num_tokens, (int, np.integer)) \
            else list(num_tokens)
        if len(counts) != len(prompts):
            raise GenerationError(f"num_tokens has {len(counts)} values for {len(prompts)} "
                                  "prompts")
        for count in counts:
            check_sampling_args(count)
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or \
                batch_size < 1:
            raise GenerationError(f"batch_size={batch_size!r} must be an integer >= 1")
        sampler = resolve_sampler(sampler)
        seed = _check_seed(seed, len(prompts))
        ids = [_check_ids(p, self.model.vocab_size) for p in prompts]
        options = dict(chunk_len=self._chunk_len(chunk_len),
                       exclude_ids=_check_exclude(exclude_ids, self.model.vocab_size),
                       stop_ids=_check_exclude(stop_ids, self.model.vocab_size, "stop_ids"),
                       penalty=check_penalty(repetition_penalty))
        results = []
        for start in range(0, len(ids), batch_size):
            with self._first_run():
                out = self._decoding.run_prompts(ids[start:start + batch_size],
                                                 counts[start:start + batch_size], sampler,
                                                 seed=seed + start, **options)
            tokens, lengths = out["tokens"].numpy(), out["lengths"].numpy()
            results.extend(row[:n].astype(np.int64) for row, n in zip(tokens, lengths))
        return results

    def stream(self, prompt_ids, num_tokens, *, seed=None, sampler=None, chunk_len=None,
               exclude_ids=(), stop_ids=(), repetition_penalty=1.0, every=1):
        """Yields the tokens `generate(prompt_ids, num_tokens, seed=seed)` draws (one row),
        `every` tokens at a time, as they are drawn: a Python generator.

        Each call of the compiled loop continues from the state of the one
        before (its last token fed first), with the same seeds: the tokens
        are those of one `generate` call.

        Yields:
            int64 arrays of new tokens (the last may be shorter; none after a stop).
        """
        check_sampling_args(num_tokens)
        if isinstance(every, bool) or not isinstance(every, (int, np.integer)) or every < 1:
            raise GenerationError(f"every={every!r} must be an integer >= 1")
        sampler = resolve_sampler(sampler)
        seed = _check_seed(seed)
        ids = _check_ids(prompt_ids, self.model.vocab_size)
        exclude = _check_exclude(exclude_ids, self.model.vocab_size)
        stops = _check_exclude(stop_ids, self.model.vocab_size, "stop_ids")
        penalty = check_penalty(repetition_penalty)
        chunk_len = self._chunk_len(chunk_len)
        state, history, done = None, ids, 0
        while done < num_tokens:
            count = min(every, num_tokens - done)
            with self._first_run():
                out = self._decoding.run(ids, count, sampler, state=state, chunk_len=chunk_len,
                                         seed=seed, step_offset=done, exclude_ids=exclude,
                                         stop_ids=stops, penalty=penalty, history_ids=history)
            new = out["tokens"].numpy()[0, :int(out["lengths"].numpy()[0])].astype(np.int64)
            if new.size:
                yield new
            if new.size < count:  # stopped
                return
            done += count
            state, ids = out["state"], new[-1:].astype(np.int32)
            history = np.concatenate([history, ids])


def _padded(tokens, lengths, num_tokens):
    """int64 [B, N]: `tokens` [B, n] with -1 after each row's length."""
    out = np.full((tokens.shape[0], num_tokens), -1, np.int64)
    for row, (values, n) in enumerate(zip(tokens, lengths)):
        out[row, :n] = values[:n]
    return out


def check_penalty(value):
    """`value` as a float when it is a repetition penalty (> 0), else a GenerationError."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.number)) or not (
            np.isfinite(value) and value > 0):
        raise GenerationError(f"repetition_penalty={value!r} must be a number > 0 (1: none; "
                              "> 1 makes repeated tokens less likely)")
    return float(value)


def resolve_sampler(sampler=None, temperature=1.0, top_k=0, top_p=1.0, greedy=False):
    """The registered `Sampler` to run: `sampler` (an instance, or a name with its
    defaults), else the keyword options: "greedy", or "sample" (temperature, top_k, top_p).

    Raises:
        GenerationError: an unknown name, or keyword options given with `sampler`.
    """
    if sampler is None:
        if greedy:
            return get_sampler("greedy")
        return get_sampler("sample", temperature=temperature, top_k=top_k, top_p=top_p)
    given = [name for name, value, default in (
        ("temperature", temperature, 1.0), ("top_k", top_k, 0), ("top_p", top_p, 1.0),
        ("greedy", greedy, False)) if value != default]
    if given:
        raise GenerationError(f"{given[0]}: give the sampler's parameters to the sampler, "
                              f"not with sampler={getattr(sampler, 'name', sampler)!r}")
    try:
        return get_sampler(sampler) if isinstance(sampler, str) else _registered(sampler)
    except SamplerError as error:
        raise GenerationError(str(error)) from None


def _registered(sampler):
    if not isinstance(sampler, Sampler):
        raise GenerationError(f"sampler={sampler!r} must be a sampler name or a "
                              "samplers.base.Sampler")
    if type(sampler) not in registered():
        raise GenerationError(f"sampler={sampler.name!r} is not registered: "
                              "samplers.registry.register_sampler(its class) first")
    return sampler


def _check_ids(prompt_ids, vocab_size):
    ids = np.asarray(prompt_ids, dtype=np.int64).reshape(-1)
    if ids.size == 0:
        raise GenerationError("prompt_ids is empty: start from the tokenizer's line start "
                              "(encode_prompt does this for an empty text prompt)")
    if ids.min() < 0 or ids.max() >= vocab_size:
        raise GenerationError(f"prompt_ids must be in [0, {vocab_size}) (the model's vocabulary), "
                              f"got {ids.min()}..{ids.max()}: use the run's tokenizer")
    return ids.astype(np.int32)


def _check_exclude(exclude_ids, vocab_size, name="exclude_ids"):
    ids = np.asarray(exclude_ids, dtype=np.int64).reshape(-1)
    if ids.size and (ids.min() < 0 or ids.max() >= vocab_size):
        raise GenerationError(f"{name} must be in [0, {vocab_size}) (the model's "
                              f"vocabulary), got {ids.min()}..{ids.max()}")
    return tf.constant(ids.astype(np.int32), tf.int32)  # [K]


def _check_seed(seed, rows=1):
    if seed is None:
        return secrets.randbits(61)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not (
            0 <= seed < 2**62 - rows + 1):
        raise GenerationError(f"seed={seed!r} must be an integer in [0, 2**62)")
    return int(seed)


def generate(model, prompt_ids, num_tokens, *, temperature=1.0, top_k=0, top_p=1.0, greedy=False,
             seed=None, mem_len=None, chunk_len=None, exclude_ids=(), sampler=None):
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
        sampler: a registered sampler instead of the options above (`Decoder.generate`).

    Returns:
        list of `num_tokens` generated ids (the prompt not included).
    """
    decoder = Decoder(model, mem_len)
    tokens = decoder.generate(prompt_ids, num_tokens, temperature=temperature, top_k=top_k,
                              top_p=top_p, greedy=greedy, seed=seed, chunk_len=chunk_len,
                              exclude_ids=exclude_ids, sampler=sampler)
    return tokens[0].tolist()
