"""Text generation from a trained run of any model family, with the state as a cache.

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
while the memory grows from 0 to `mem_len`. Memories padded to `mem_len` from the start would keep
shapes
fixed, but need an attention mask the model does not take (zero padding is
attended to and changes the result).

Sampling: `log_probs / temperature`, then top-k, then top-p (nucleus, on the
renormalised top-k distribution), then one Gumbel-max draw per row with a
stateless seed `(seed + row, step)`, so a seed reproduces a sample, and row r
of a batch equals a single sample drawn with seed `seed + r`. `greedy` takes
the argmax of the log-probabilities and ignores the other options.

Size glossary:
    B: rows (samples) generated together.    T: tokens of one forward pass.
    M: memory length (<= mem_len).           D: model width (d_model).
    V: vocabulary size.                      N: generated tokens.
"""

import dataclasses
import os
import secrets

from absl import logging
import numpy as np
import tensorflow as tf

import data_utils
from model.families import build_model
from model.interface import check_model
from runstore import checkpoints
from runstore.config import RunConfig
from runstore.run_dir import CONFIG_FILE, DATA_DIR

META_FILE = "meta.json"  # of a built data directory (docs/interfaces.md)
# Smallest uniform draw: keeps -log(-log u) finite.
_TINY = float(np.finfo(np.float32).tiny)


class GenerationError(ValueError):
    """A user-fixable problem: no trained model, bad argument, unusable prompt."""


# ---------------------------------------------------------------- arguments


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


# ----------------------------------------------------------------- sampling


def filter_logits(logits, top_k=0, top_p=1.0):
    """Top-k then top-p (nucleus) filtering; removed entries become -inf.

    Top-k keeps the `top_k` largest logits (0: all). Top-p then keeps, of the
    remaining distribution `softmax(logits)`, the smallest set of most likely
    tokens whose mass is >= `top_p` (1: all). Ties with the last kept value
    are kept too (the result does not depend on a sort order).

    Args:
        logits: float [B, V] (already divided by the temperature).
        top_k: int or int32 scalar tensor, >= 0.
        top_p: float or float32 scalar tensor in (0, 1].

    Returns:
        float32 [B, V]: kept logits unchanged, the others -inf.
    """
    logits = tf.cast(logits, tf.float32)  # [B, V]
    vocab = tf.shape(logits)[-1]
    top_k = tf.convert_to_tensor(top_k, tf.int32)
    top_p = tf.convert_to_tensor(top_p, tf.float32)
    neg_inf = tf.constant(-np.inf, tf.float32)
    ordered = tf.sort(logits, axis=-1, direction="DESCENDING")  # [B, V]
    k = tf.where(top_k > 0, tf.minimum(top_k, vocab), vocab)
    kth = tf.gather(ordered, k - 1, axis=-1)[:, None]  # [B, 1]
    logits = tf.where(logits < kth, neg_inf, logits)
    # Token at sorted position i is kept when the mass before it is < p.
    ordered = tf.sort(logits, axis=-1, direction="DESCENDING")  # [B, V]
    before = tf.cumsum(tf.nn.softmax(ordered, axis=-1), axis=-1, exclusive=True)  # [B, V]
    kept = tf.logical_and(before < top_p, tf.math.is_finite(ordered))  # [B, V], a prefix
    count = tf.maximum(tf.reduce_sum(tf.cast(kept, tf.int32), axis=-1), 1)  # [B]
    threshold = tf.gather(ordered, count - 1, batch_dims=1)[:, None]  # [B, 1]
    # top_p == 1 keeps everything even when rounding makes the cumsum reach 1 early.
    drop = tf.logical_and(logits < threshold, top_p < 1.0)
    return tf.where(drop, neg_inf, logits)


def sample_tokens(log_probs, seeds, temperature=1.0, top_k=0, top_p=1.0, greedy=False):
    """Draws one token per row: int32 [B] from log_probs float [B, V].

    `seeds` int64 [B, 2] is the stateless seed of each row; `temperature`
    (> 0), `top_k` (>= 0, 0: off), `top_p` ((0, 1], 1: off) and `greedy`
    (argmax of `log_probs`, the other options ignored) are scalars.
    """
    log_probs = tf.cast(log_probs, tf.float32)  # [B, V]

    def draw():
        logits = filter_logits(log_probs / tf.cast(temperature, tf.float32), top_k, top_p)

        def one_row(args):
            row, seed = args  # [V], [2]
            uniform = tf.random.stateless_uniform(tf.shape(row), seed=seed, minval=_TINY,
                                                  maxval=1.0)
            # Gumbel-max: argmax(l + g) is distributed as softmax(l); -inf never wins.
            return tf.argmax(row - tf.math.log(-tf.math.log(uniform)), output_type=tf.int32)

        return tf.map_fn(one_row, (logits, tf.cast(seeds, tf.int64)),
                         fn_output_signature=tf.int32)

    return tf.cond(tf.convert_to_tensor(greedy, tf.bool),
                   lambda: tf.argmax(log_probs, axis=-1, output_type=tf.int32), draw)


# ------------------------------------------------------------------ decoder


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
                   tf.TensorSpec([], tf.bool)]  # seeds, temperature, top_k, top_p, greedy
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
                 top_p=1.0, greedy=False, seed=None, chunk_len=None, return_log_probs=False):
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
            return_log_probs: also return the distribution of every step.

        Returns:
            int64 [B, N] token ids; with `return_log_probs`, also float32
            [B, N, V] log-probabilities each token was drawn from (before
            temperature and filtering).

        Raises:
            GenerationError: an invalid argument, named.
        """
        check_sampling_args(num_tokens, temperature, top_k, top_p, num_samples)
        seed = _check_seed(seed)
        log_probs, state = self.prefill(prompt_ids, chunk_len)
        # The prompt ran once for one row; the rows only differ from here on.
        log_probs = tf.repeat(log_probs, num_samples, axis=0)  # [B, V]
        state = [tf.repeat(s, num_samples, axis=0) for s in state]  # [B, ...]
        options = (tf.constant(temperature, tf.float32), tf.constant(top_k, tf.int32),
                   tf.constant(top_p, tf.float32), tf.constant(bool(greedy)))
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


def _check_seed(seed):
    if seed is None:
        return secrets.randbits(62)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**62:
        raise GenerationError(f"seed={seed!r} must be an integer in [0, 2**62)")
    return int(seed)


def generate(model, prompt_ids, num_tokens, *, temperature=1.0, top_k=0, top_p=1.0, greedy=False,
             seed=None, mem_len=None, chunk_len=None):
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

    Returns:
        list of `num_tokens` generated ids (the prompt not included).
    """
    decoder = Decoder(model, mem_len)
    tokens = decoder.generate(prompt_ids, num_tokens, temperature=temperature, top_k=top_k,
                              top_p=top_p, greedy=greedy, seed=seed, chunk_len=chunk_len)
    return tokens[0].tolist()


# ------------------------------------------------------------- text prompts


@dataclasses.dataclass(frozen=True)
class Prompt:
    """An encoded text prompt: the text as given, the ids fed to the model (never
    empty), the words mapped to the unknown token, and whether the prompt was
    empty so that `ids` is the tokenizer's line start (see `encode_prompt`)."""

    text: str
    ids: tuple
    unknown_words: tuple
    from_line_start: bool


def _unknown_id(tokenizer):
    for name, i in tokenizer.reserved_ids().items():
        if "unk" in name.lower():
            return i
    return None


def encode_prompt(tokenizer, text):
    """Encodes a text prompt for generation.

    An empty prompt (or one without tokens, e.g. only spaces) starts from the
    tokenizer's line start, `tokenizer.encode("\\n")`: <eos> for the word and
    sentencepiece tokenizers (and byte with eos), else the newline byte.

    Args:
        tokenizer: a `data_utils` tokenizer.
        text: str.

    Returns:
        A `Prompt`.

    Raises:
        GenerationError: the text is not valid Unicode or the tokenizer fails.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise GenerationError(f"the prompt is not valid UTF-8 text (bad character at position "
                              f"{error.start}): pass UTF-8 text") from None
    try:
        ids = tokenizer.encode(text)
        unknown, unk = [], _unknown_id(tokenizer)
        if unk is not None and unk in ids:
            literal = tokenizer.id_to_token(unk)
            for word in text.split():
                if word != literal and word not in unknown and unk in tokenizer.encode(word):
                    unknown.append(word)
        start = not ids
        if start and not tokenizer.line_ends:
            raise GenerationError(
                "the prompt is empty and this run's sentencepiece build has no line ends "
                "(build_data.py --nosp_eos), so there is no line start to begin from: give a "
                "non-empty --prompt or --prompt_file")
        if start:
            ids = tokenizer.encode("\n")
    except (ValueError, RuntimeError, UnicodeError, data_utils.DataError) as error:
        raise GenerationError(f"the {tokenizer.kind} tokenizer cannot encode the prompt: "
                              f"{error}") from None
    return Prompt(text, tuple(int(i) for i in ids), tuple(unknown), start)


def continuation_text(tokenizer, prompt, new_ids):
    """The text of `new_ids` to append to `prompt.text` (for the word tokenizer
    it starts with the separating space, or follows the newline of an <eos>)."""
    new_ids = [int(i) for i in new_ids]
    if prompt.from_line_start:
        return tokenizer.decode(new_ids)
    head = tokenizer.decode(list(prompt.ids))
    full = tokenizer.decode(list(prompt.ids) + new_ids)
    if full.startswith(head):
        return full[len(head):]
    return " " + tokenizer.decode(new_ids)


# --------------------------------------------------------------------- runs


@dataclasses.dataclass
class Run:
    """A trained model ready for inference: the float32 model (any family) with the
    checkpoint's weights, the data's tokenizer, the run's config (`RunConfig`), the
    checkpoint prefix restored, the directory the tokenizer came from and the
    run directory it was loaded from (config.model_dir is where it was trained),
    the build's meta.json, and for a `.keras` package (`serving.packaged`) the
    loaded `PackagedLM` (then checkpoint_path is the file, data_dir and
    model_dir are empty)."""

    model: object
    tokenizer: object
    config: RunConfig
    checkpoint_path: str
    data_dir: str
    model_dir: str = ""
    meta: dict | None = None
    package: object = None
    _decoders: dict = dataclasses.field(default_factory=dict, repr=False)

    @property
    def default_mem_len(self):
        """int: the run's evaluation memory (eval_mem_len), or the model's mem_len if 0."""
        return self.config.eval_mem_len or self.model.mem_len

    def decoder(self, mem_len=None):
        """The (cached) `Decoder` for `mem_len` (None: `default_mem_len`)."""
        mem_len = self.default_mem_len if mem_len is None else int(mem_len)
        if mem_len not in self._decoders:
            self._decoders[mem_len] = Decoder(self.model, mem_len)
        return self._decoders[mem_len]


def _no_model(model_dir, why):
    if os.path.isfile(os.path.join(model_dir, META_FILE)):
        return GenerationError(
            f"{model_dir} is a built data directory (it holds {META_FILE}), not a run: pass the "
            f"run directory of a model trained on it (train.py --data_dir={model_dir} "
            "--model_dir=runs/<name>), or a .keras file with --model")
    if os.path.isfile(model_dir):
        return GenerationError(f"{model_dir} is a file, not a run directory: pass a .keras "
                               "file with --model, a run directory with --model_dir")
    return GenerationError(f"no trained model in {model_dir} ({why}): run train.py "
                           f"--model_dir={model_dir} first")


def resolve_checkpoint(model_dir, checkpoint="best"):
    """The checkpoint prefix to restore, or a GenerationError.

    `checkpoint` is "best" (model_dir/best; the newest good checkpoint, with
    a warning, when the run was never evaluated or its best one is damaged),
    "latest" (the newest good one: a damaged newer one is skipped with a
    warning naming its file), or a path: a `ckpt-<step>` prefix (absolute or
    in model_dir) or a directory holding a `checkpoint` file. Every
    checkpoint is read back whole before it is used
    (`runstore.checkpoints.resolve_checkpoint`).
    """
    try:
        path, warnings = checkpoints.resolve_checkpoint(model_dir, checkpoint)
    except checkpoints.NoCheckpoint:
        raise _no_model(model_dir, "no checkpoint") from None
    except checkpoints.CheckpointError as error:
        raise GenerationError(str(error)) from None
    for warning in warnings:
        logging.warning("%s", warning)
    return path


def _tokenizer_dir(model_dir, config):
    """model_dir/data if it holds a build's meta.json, else the config's data_dir."""
    for directory in (os.path.join(model_dir, DATA_DIR), config.data_dir):
        if os.path.isfile(os.path.join(directory, META_FILE)):
            return directory
    raise GenerationError(
        f"cannot find the tokenizer of {model_dir}: neither {os.path.join(model_dir, DATA_DIR)} "
        f"nor data_dir={config.data_dir!r} (from {CONFIG_FILE}) holds a meta.json: copy the "
        f"built data's meta.json and tokenizer files into {os.path.join(model_dir, DATA_DIR)}")


def _override_model(config, overrides, model_dir):
    """The run's RunConfig with some model fields changed (checked, named as flags)."""
    from model.families import FAMILIES

    fields = {f.name for f in dataclasses.fields(config.model)}
    for name, value in overrides.items():
        if name not in fields:
            owners = [f.name for f in FAMILIES.values()
                      if name in {x.name for x in dataclasses.fields(f.config_class)}]
            raise GenerationError(
                f"--{name}={value!r} does not apply to {model_dir}: its {config.model_family} "
                f"model has no {name} setting (only {', '.join(owners) or 'no'} models have "
                f"one): drop --{name}")
    try:
        return config.replace(model=config.model.replace(**overrides))
    except ValueError as error:
        raise GenerationError(f"--{'/--'.join(overrides)}: {error}") from None


def load_run(model_dir, checkpoint="best", model_overrides=None):
    """Loads a trained run: config, tokenizer and the weights of one checkpoint.

    The model is built in float32 whatever the training precision.

    Args:
        model_dir: directory written by train.py.
        checkpoint: "best", "latest" or a path (see `resolve_checkpoint`).
        model_overrides: optional dict of model config fields to change
            before the model is built, settings that leave the weights as
            they are (evaluation's clamp_len, same_length). `Run.config`
            holds the changed config.

    Returns:
        A `Run`.

    Raises:
        GenerationError: no trained model, unreadable config, missing
            tokenizer, a checkpoint that does not fit the config, or an
            override the run's model family does not have (named as a flag).
    """
    model_dir = os.fspath(model_dir)
    if not os.path.isdir(model_dir):
        raise _no_model(model_dir, "no such directory")
    if not os.path.isfile(os.path.join(model_dir, CONFIG_FILE)):
        raise _no_model(model_dir, f"no {CONFIG_FILE}")
    try:
        config = RunConfig.load(model_dir)
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise GenerationError(f"cannot read {os.path.join(model_dir, CONFIG_FILE)} ({error}): "
                              "restore the file written by train.py") from None
    if model_overrides:
        config = _override_model(config, dict(model_overrides), model_dir)
    path = resolve_checkpoint(model_dir, checkpoint)
    data_dir = _tokenizer_dir(model_dir, config)
    try:
        meta, tokenizer = data_utils.load_built(data_dir)
    except data_utils.DataError as error:
        raise GenerationError(f"cannot load the tokenizer of {model_dir}: {error}") from None
    if tokenizer.vocab_size != config.model.vocab_size:
        raise GenerationError(
            f"the tokenizer in {data_dir} has {tokenizer.vocab_size} ids but the model in "
            f"{model_dir} has vocab_size={config.model.vocab_size}: use the data it was trained on")
    model = check_model(build_model(config.model, dtype="float32"))
    try:
        checkpoints.restore_model_variables(
            model, path, what=f"the model of {os.path.join(model_dir, CONFIG_FILE)}")
    except checkpoints.CheckpointError as error:
        raise GenerationError(str(error)) from None
    return Run(model, tokenizer, config, path, data_dir, model_dir, meta=meta)


def load(model_dir=None, model=None, checkpoint="best", model_overrides=None):
    """A `Run` from a run directory (`load_run`) or a `.keras` package
    (`serving.packaged.load_package`): give exactly one of `model_dir`, `model`."""
    if (model_dir is None) == (model is None):
        raise GenerationError("give either --model (a .keras file) or --model_dir (a run "
                              "directory)")
    if model is not None:
        from serving.packaged import load_package

        return load_package(model, model_overrides)
    return load_run(model_dir, checkpoint, model_overrides)


def generate_text(run, prompt, num_tokens, *, temperature=1.0, top_k=0, top_p=1.0, greedy=False,
                  seed=None, mem_len=None, chunk_len=None):
    """Generates the text that follows `prompt` (the prompt not included).

    An empty prompt starts from the tokenizer's line start (`encode_prompt`).
    Prompt words the tokenizer does not know become its unknown token and are
    listed in one logged warning. `mem_len` defaults to `run.default_mem_len`,
    `chunk_len` to the run's seq_len; the other arguments are `generate`'s.
    """
    check_sampling_args(num_tokens, temperature, top_k, top_p)
    encoded = encode_prompt(run.tokenizer, prompt)
    if encoded.unknown_words:
        logging.warning("prompt words unknown to the tokenizer, encoded as <unk>: %s",
                        " ".join(encoded.unknown_words))
    tokens = run.decoder(mem_len).generate(
        encoded.ids, num_tokens, temperature=temperature, top_k=top_k, top_p=top_p,
        greedy=greedy, seed=seed,
        chunk_len=run.config.seq_len if chunk_len is None else chunk_len)
    return continuation_text(run.tokenizer, encoded, tokens[0])
