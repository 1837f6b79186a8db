"""Exports a trained model with its tokenizer: a `.keras` file and a TensorFlow SavedModel.

Both are self-contained: the tokenizer, with the frequency ranking the
model's ids follow, travels inside, so text goes in and text comes out
without the run directory or the built data.

`.keras` (`export_keras`): a `serving.packaged.PackagedLM`, the model (any
family) with its config and weights, the tokenizer files as Keras assets and
the run's settings. `generate.py --model=lm.keras` and `evaluate.py
--model=lm.keras` use it; in Python `serving.packaged.load_package(path)`
gives a `serving.generation.Run`, and `keras.saving.load_model(path)` works
after `import serving.packaged`. The weights may be stored in float16 or
bfloat16 (`dtype`), half the size; the loaded model computes in float32.

SavedModel (`export_saved_model`): a `tf.Module` for TF Serving or
`tf.saved_model.load` without any project code (a sentencepiece tokenizer
needs `import tensorflow_text` first, which registers its op). Signatures:

    generate(prompt: string [], num_tokens: int32 [], num_samples: int32 [],
             temperature: float32 [], top_k: int32 [], top_p: float32 [],
             greedy: bool [], seed: int64 [])
        -> {"text": string [B], "continuation": string [B],
            "token_ids": int32 [B, N], "prompt_ids": int32 [L]}
    generate_allow_unk(the same inputs) -> the same outputs
    generate_with_sampler(prompt: string [], num_tokens: int32 [], num_samples: int32 [],
                          sampler: string [], params: float32 [P], seed: int64 [],
                          allow_unk: bool [])
        -> the same outputs
    generate_batch(prompts: string [P], num_tokens: int32 [], sampler: string [],
                   params: float32 [S], seed: int64 [], allow_unk: bool [],
                   stop: string [None], repetition_penalty: float32 [])
        -> {"text": string [P], "continuation": string [P],
            "token_ids": int32 [P, N] (-1 after a row's end), "lengths": int32 [P]}
    tokenize(text: string []) -> {"token_ids": int32 [L]}
    detokenize(token_ids: int32 [L]) -> {"text": string []}
    serve(token_ids: int32 [B, T], state_0, ..., state_{k-1}: float32)
        -> {"log_probs": float32 [B, T, V], "new_state_0", ..., "new_state_{k-1}"}

`generate` is `generate.py` in the graph, the one decoding loop
(`samplers.decoding.decode`, which `serving.decoder.Decoder` compiles too):
the prompt is tokenized (serving/graph_tokenizer.py), run in chunks of the
run's seq_len with the memory kept to `mem_len` (default: the run's
eval_mem_len), then each of the B = num_samples rows samples N tokens with
the stateless seed (seed + row, step) and the same temperature / top-k /
top-p / greedy rules (the registered "sample" and "greedy" samplers): for
one seed it returns the tokens `generate.py --seed` draws.
`generate_with_sampler` runs any sampler registered when the model was
exported (samplers/registry.py: "greedy", "sample", "temperature", "top_k",
"top_p" and any a program registered): `sampler` is its name, `params` its
parameters in its `params` order (fewer: the rest take their defaults;
`generate.py --sampler=NAME --sampler_args=...` takes the same), dispatched
in the graph; an unknown name or a bad parameter is an InvalidArgumentError
naming it. `generate_batch` runs P prompts of any lengths as one batch
(`samplers.decoding.decode_prompts`): prompt p gets the tokens
`generate_with_sampler` draws for it alone with seed + p; each continuation
ends before the first string of `stop` it holds (none: an empty list; an
empty string is an error), and `repetition_penalty` (1: none) multiplies
the log-probabilities of the ids already in the prompt or the row, as
`lm.generate(prompts, stop=..., repetition_penalty=...)`. `generate` never
draws the unknown-word token (`Tokenizer.unknown_ids()`, WikiText's <unk>);
`generate_allow_unk` may, as
`generate.py --allow_unk`. `text` is the prompt followed by the
continuation, what generate.py prints. An empty prompt starts at the
tokenizer's line start. top_k 0 and top_p 1 keep every token.

`serve` runs one segment with the model's state (model/interface.py): the
k state inputs are the model's `state_signature()` in order (a
Transformer-XL: one memory [B, M, D] per attention-carrying block; SHA-RNN:
each LSTM's h [B, D] and c [B, D], then each attention memory [B, M, D]).
`B`, `T` and `M` are free (M = 0 is an empty memory); new memories keep
min(M + T, mem_len) positions; feeding `new_state_i` back as `state_i` with
the next segment continues the text. The tokenizer files and meta.json are
also written to `path/tokenizer/` for Python (`data_utils.load_tokenizer`).

Each export carries its model card (serving/card.py: Markdown read from the
run's files): a `.keras` file holds it (`PackagedLM.card`) and has a copy beside
it (`lm.keras` -> `lm.md`); a SavedModel directory holds it as `README.md`.

Both exports, with their cards, are written to temporary paths next to the
output and renamed at the end, so a failed export (a full disk, an
interruption) leaves nothing behind; a failed write is an `ExportError`
naming the output and the error. What an export killed mid-write left beside
the output (its temporary) is removed by the next export to the same output.

Size glossary: B batch (samples), T segment length, M memory length, D
d_model, V vocabulary size, L prompt tokens, N generated tokens.
"""

import json
import os
import shutil
import tempfile

from absl import logging
import tensorflow as tf

from pardata.meta import META_FILE
from runstore import run_dir
from samplers.decoding import Options, decode, decode_prompts, join_after_of, sampler_checks
from samplers.registry import registered
from serving.card import SAVED_MODEL_CARD, card_path, render_card, run_facts
from serving.errors import GenerationError
from serving.prompts import token_texts

SIGNATURE = "serve"
GENERATE_SIGNATURE = "generate"
TOKENIZER_DIR = "tokenizer"
DTYPES = ("float32", "float16", "bfloat16")


class ExportError(GenerationError):
    """A user-fixable export problem (bad output path, existing output)."""


def check_output(path, overwrite, name=None,
                 overwrite_fix="overwrite it (overwrite=True, export.py --overwrite)"):
    """Checks an output path before any work (train.py's --export too).

    Args:
        path: the output file or directory.
        overwrite: an existing output may be replaced.
        name: what the messages call the output (default "output <path>").
        overwrite_fix: how the message says to replace an existing output.

    Returns:
        The path, a str.

    Raises:
        ExportError: the path (or, for a `.keras` file, the model card written beside
            it, `serving.card.card_path`) is empty, exists (without `overwrite`), its
            directory does not exist or cannot be written (read-only, no permission).
    """
    path = os.fspath(path)
    if not path:
        raise ExportError("the output path is empty: give a file or directory name")
    flag = f" ({name.split('=')[0]})" if name else ""  # e.g. train.py's --export
    name = name or f"output {path}"
    if os.path.exists(path) and not overwrite:
        raise ExportError(f"{name} already exists: remove it, choose another output or "
                          f"{overwrite_fix}")
    card = card_path(path) if path.endswith(".keras") else None
    if card and os.path.exists(card) and not overwrite:
        raise ExportError(f"{card}, the model card export writes beside {name}, already "
                          f"exists: remove it, choose another output or {overwrite_fix}")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise ExportError(f"the directory {parent} of {name} does not exist: create it first")
    problem = run_dir.unwritable(path)  # read-only, no permission: before loading the model
    if problem:
        cause, fix = run_dir.reason_and_fix(problem, path)
        raise ExportError(f"cannot write {os.path.abspath(path)}{flag}: {cause}; {fix}; "
                          "nothing was written")
    return path


def export_keras(run, path, overwrite=False, dtype="float32"):
    """Saves the run's model with its tokenizer as one `.keras` file, its model card inside
    (`PackagedLM.card`) and beside it (`serving.card.card_path`: `lm.keras` -> `lm.md`).

    Args:
        run: a `serving.generation.Run` (from `load_run` or `load_package`).
        path: output file, ending in ".keras".
        overwrite: replace an existing file.
        dtype: storage dtype of the weights: float32, or float16 / bfloat16
            (half the size, the weights rounded; the loaded model computes in
            float32).

    Returns:
        The path written.

    Raises:
        ExportError: the name does not end in ".keras", the file or its card exists,
            its directory does not exist, or an unknown dtype; a failed write (neither
            the file nor its card is left).
    """
    from serving.packaged import package_run

    path = check_output(path, overwrite)
    if not path.endswith(".keras"):
        raise ExportError(f"output {path} must end in .keras for a Keras export")
    if dtype not in DTYPES:
        raise ExportError(f"dtype={dtype!r} must be one of {', '.join(DTYPES)}")
    _remove_stale_temporaries(path)
    _remove_stale_temporaries(card_path(path))
    try:
        _save_with_card(package_run(run, dtype=dtype), path)
    except (run_dir.WriteError, tf.errors.OpError) as error:
        raise _write_error(path, error) from None
    return path


def _save_with_card(package, path):
    """Saves `package` to `path` and its card beside it (`card_path`): both or neither.

    Both are written to temporaries first; the package is renamed into place, then the
    card; if the card's rename fails, the new package is removed again.
    """
    placed = False
    try:
        with run_dir.atomic_output(card_path(path)) as card_tmp:
            with run_dir.atomic_output(path, suffix=".keras") as tmp:  # Keras wants the suffix
                package.save(tmp)
                _write_text(card_tmp, package.card)
            placed = True
    except BaseException:
        if placed:
            run_dir.remove_if_present(path)
        raise


def _write_text(path, text):
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


class _Untracked:
    """Holds a value without TensorFlow's object tracking seeing it."""

    def __init__(self, value):
        self.value = value


def _write_error(path, error):
    """The ExportError of a failed write (a `run_dir.WriteError` or a TensorFlow error)."""
    if isinstance(error, run_dir.WriteError):
        error = error.reason
    cause, fix = run_dir.reason_and_fix(error, path)
    return ExportError(f"cannot write {os.path.abspath(path)}: {cause}; nothing was written "
                       f"(the temporary files are removed): {fix}, then export again")


class ServingModule(tf.Module):
    """The SavedModel root: the model's variables, the tokenizer and the signatures.

    Args:
        model: a built language model (model/interface.py).
        mem_len: int >= 0, memory positions kept in the new state.
        tokenizer: the run's `pardata.tokenizers.Tokenizer`.
        chunk_len: int >= 1, prompt tokens per forward pass in `generate`.
        asset_dir: an existing directory for asset files (the word list).
    """

    def __init__(self, model, mem_len, tokenizer, chunk_len, asset_dir):
        from serving.graph_tokenizer import GraphTokenizer

        super().__init__(name="language_model")
        # Kept out of TensorFlow's object graph (the variables are tracked
        # below): saving would otherwise trace every Keras layer's call.
        self._untracked = _Untracked(model)
        self._mem_len = int(mem_len)
        self._chunk_len = int(chunk_len)
        # Tracked explicitly: Keras 3 layers kept in Python lists are not
        # reached by TensorFlow's object graph (as in runstore.checkpoints).
        self.model_variables = [getattr(v, "value", v) for v in model.variables]
        self.mem_len = tf.Variable(self._mem_len, trainable=False, dtype=tf.int32, name="mem_len")
        self.tokenizer = GraphTokenizer(tokenizer, asset_dir)
        self._vocab = int(model.vocab_size)
        # The ids an empty prompt starts from (none: a build without line ends).
        self._has_line_start = bool(tokenizer.line_ends)
        self._line_start = tf.constant(tokenizer.encode("\n") if tokenizer.line_ends else [],
                                       tf.int32)
        self._state_specs = [tf.TensorSpec(spec.shape, tf.float32, name=f"state_{i}")
                             for i, spec in enumerate(model.state_signature())]
        self.serve = tf.function(self._serve, input_signature=[
            tf.TensorSpec([None, None], tf.int32, name="token_ids"), *self._state_specs])
        # Never drawn by `generate` (generate_allow_unk draws them).
        self._unknown_ids = tf.constant(tokenizer.unknown_ids(), tf.int32, shape=[
            len(tokenizer.unknown_ids())])
        options = [tf.TensorSpec([], tf.string, name="prompt"),
                   tf.TensorSpec([], tf.int32, name="num_tokens"),
                   tf.TensorSpec([], tf.int32, name="num_samples"),
                   tf.TensorSpec([], tf.float32, name="temperature"),
                   tf.TensorSpec([], tf.int32, name="top_k"),
                   tf.TensorSpec([], tf.float32, name="top_p"),
                   tf.TensorSpec([], tf.bool, name="greedy"),
                   tf.TensorSpec([], tf.int64, name="seed")]
        # autograph=False: the loops are explicit tf.while_loop / tf.cond, and
        # converting the model and tokenizer code would double the tracing time.
        # The two generate signatures call one traced function (traced once).
        self._generate_any = tf.function(self._generate, autograph=False, input_signature=[
            *options, tf.TensorSpec([], tf.bool, name="allow_unk")])
        self.generate = tf.function(self._generate_without_unk, autograph=False,
                                    input_signature=options)
        self.generate_allow_unk = tf.function(self._generate_with_unk, autograph=False,
                                              input_signature=options)
        # The samplers registered now are the branches of `generate_with_sampler`.
        self._registered = _Untracked(registered())
        self.generate_with_sampler = tf.function(
            self._generate_named, autograph=False, input_signature=[
                *options[:3], tf.TensorSpec([], tf.string, name="sampler"),
                tf.TensorSpec([None], tf.float32, name="params"), options[-1],
                tf.TensorSpec([], tf.bool, name="allow_unk")])
        self._join_after = join_after_of(self._next, self._float_state(), self._mem_len)
        # Each id's own text: the ids that end a row at once for a stop string.
        self._token_texts = tf.constant(token_texts(tokenizer))
        self.generate_batch = tf.function(
            self._generate_batch, autograph=False, input_signature=[
                tf.TensorSpec([None], tf.string, name="prompts"), options[1],
                tf.TensorSpec([], tf.string, name="sampler"),
                tf.TensorSpec([None], tf.float32, name="params"), options[-1],
                tf.TensorSpec([], tf.bool, name="allow_unk"),
                tf.TensorSpec([None], tf.string, name="stop"),
                tf.TensorSpec([], tf.float32, name="repetition_penalty")])
        self.tokenize = tf.function(
            lambda text: {"token_ids": self.tokenizer.encode(text)}, autograph=False,
            input_signature=[tf.TensorSpec([], tf.string, name="text")])
        self.detokenize = tf.function(
            lambda token_ids: {"text": self.tokenizer.decode(token_ids)}, autograph=False,
            input_signature=[tf.TensorSpec([None], tf.int32, name="token_ids")])

    @property
    def _model(self):
        return self._untracked.value

    @property
    def _samplers(self):
        """The `Sampler` classes registered when the module was made."""
        return self._registered.value

    def signatures(self):
        """name -> tf.function, for tf.saved_model.save (which traces them once, itself)."""
        return {SIGNATURE: self.serve, GENERATE_SIGNATURE: self.generate,
                GENERATE_SIGNATURE + "_allow_unk": self.generate_allow_unk,
                GENERATE_SIGNATURE + "_with_sampler": self.generate_with_sampler,
                GENERATE_SIGNATURE + "_batch": self.generate_batch,
                "tokenize": self.tokenize, "detokenize": self.detokenize}

    def _serve(self, token_ids, *state):
        model = self._model
        state = [tf.cast(s, model.compute_dtype) for s in state]
        hidden, new_state = model(token_ids, state, training=False, mem_len=self._mem_len)
        outputs = {"log_probs": model.log_probs(hidden)}  # [B, T, V]
        for i, s in enumerate(new_state):
            outputs[f"new_state_{i}"] = tf.cast(s, tf.float32)
        return outputs

    def _next(self, ids, state):
        """[B, T], state -> (log-probs [B, V] of the token after the last position, new state)."""
        hidden, new_state = self._model(ids, list(state), training=False, mem_len=self._mem_len)
        return (tf.cast(self._model.log_probs(hidden[:, -1:])[:, 0], tf.float32),
                [tf.cast(s, tf.float32) for s in new_state])

    def _invariants(self):
        """Shapes the state keeps through a loop: batch and memory length free."""
        return [tf.TensorShape(spec.shape) for spec in self._state_specs]

    def _generate_without_unk(self, prompt, num_tokens, num_samples, temperature, top_k, top_p,
                              greedy, seed):
        return self._generate_any(prompt, num_tokens, num_samples, temperature, top_k, top_p,
                                  greedy, seed, tf.constant(False))

    def _generate_with_unk(self, prompt, num_tokens, num_samples, temperature, top_k, top_p,
                           greedy, seed):
        return self._generate_any(prompt, num_tokens, num_samples, temperature, top_k, top_p,
                                  greedy, seed, tf.constant(True))

    def _generate(self, prompt, num_tokens, num_samples, temperature, top_k, top_p, greedy,
                  seed, allow_unk):
        """The keyword options as the "greedy" or "sample" sampler (checked as before,
        greedy or not)."""
        names = [cls.name for cls in self._samplers]
        params = tf.stack([temperature, tf.cast(top_k, tf.float32), top_p])
        sample = self._samplers[names.index("sample")]
        with tf.control_dependencies(sample.graph_checks(params)):
            index = tf.where(greedy, names.index("greedy"), names.index("sample"))
        params = params[:tf.where(greedy, 0, 3)]  # "greedy" takes none
        return self._generate_sampled(prompt, num_tokens, num_samples, index, params, seed,
                                      allow_unk)

    def _generate_named(self, prompt, num_tokens, num_samples, sampler, params, seed,
                        allow_unk):
        return self._generate_sampled(prompt, num_tokens, num_samples,
                                      self._sampler_index(sampler), params, seed, allow_unk)

    def _sampler_index(self, sampler):
        """int32 scalar: the index of the registered sampler named `sampler` (asserted)."""
        names = tf.constant([cls.name for cls in self._samplers])
        found = tf.where(tf.equal(names, sampler))[:, 0]
        known = tf.debugging.Assert(tf.size(found) > 0, [
            "unknown sampler:", sampler, "the samplers of this export are",
            tf.strings.reduce_join(names, separator=", ")])
        with tf.control_dependencies([known]):
            return tf.cast(tf.reduce_min(tf.concat([found, [len(self._samplers)]], 0)),
                           tf.int32)

    def _float_state(self):
        return [tf.cast(s, tf.float32) for s in self._model.initial_state(1, 0)]

    def _generate_batch(self, prompts, num_tokens, sampler, params, seed, allow_unk, stop,
                        repetition_penalty):
        """Every prompt as one batch (`decode_prompts`): prompt p as `generate_with_sampler`
        continues it alone with seed + p; each continuation ends before its first stop."""
        index = self._sampler_index(sampler)
        count = tf.size(prompts)
        checks = [*sampler_checks(self._samplers, index, params),
                  tf.debugging.assert_greater(count, 0, message="prompts is empty"),
                  tf.debugging.assert_greater_equal(num_tokens, 1,
                                                    message="num_tokens must be >= 1"),
                  tf.debugging.assert_greater(repetition_penalty, 0.0,
                                              message="repetition_penalty must be > 0"),
                  tf.debugging.assert_greater(tf.reduce_min(tf.concat(
                      [tf.strings.length(stop), [1]], 0)), 0, message="stop holds an empty "
                      "string, which would end every continuation at once")]
        with tf.control_dependencies(checks):
            prompts = tf.identity(prompts)

        def encode(p, ids, lengths, starts):
            prompt_ids, from_line_start = self._prompt_ids(prompts[p])
            return (p + 1, ids.write(p, prompt_ids), lengths.write(p, tf.size(prompt_ids)),
                    starts.write(p, from_line_start))

        _, ids, lengths, starts = tf.while_loop(
            lambda p, *_: p < count, encode,
            (tf.constant(0), tf.TensorArray(tf.int32, size=count, infer_shape=False,
                                            element_shape=[None]),
             tf.TensorArray(tf.int32, size=count), tf.TensorArray(tf.bool, size=count)))
        ids, lengths, starts = ids.concat(), lengths.stack(), starts.stack()
        exclude = tf.cond(allow_unk, lambda: tf.zeros([0], tf.int32),
                          lambda: self._unknown_ids)  # [K]
        options = Options(self._samplers, index, params, self._vocab, self._invariants(),
                          exclude, self._stop_ids(stop), repetition_penalty)
        out = decode_prompts(self._next, self._float_state(), ids, lengths,
                             chunk_len=tf.constant(self._chunk_len),
                             num_tokens=tf.fill([count], num_tokens), seed=seed,
                             options=options, join_after=self._join_after)
        offsets = tf.cumsum(lengths, exclusive=True)

        def continuation(p):
            row = out["tokens"][p, :out["lengths"][p]]
            text = self._continuation(ids[offsets[p]:offsets[p] + lengths[p]], starts[p], row)
            return _cut_at_stops(text, stop)

        continuations = tf.map_fn(continuation, tf.range(count), fn_output_signature=tf.string)
        return {"text": tf.strings.join([prompts, continuations]),
                "continuation": continuations, "token_ids": out["tokens"],
                "lengths": out["lengths"]}

    def _stop_ids(self, stop):
        """int32 [S]: the ids whose own text holds one of the strings `stop` [None]."""
        def holds(i, hit):
            parts = tf.strings.split(self._token_texts, sep=stop[i])
            return i + 1, tf.logical_or(hit, parts.row_lengths() > 1)

        _, hit = tf.while_loop(lambda i, _: i < tf.size(stop), holds,
                               (tf.constant(0), tf.zeros([self._vocab], tf.bool)))
        return tf.cast(tf.where(hit)[:, 0], tf.int32)

    def _prompt_ids(self, prompt):
        """(int32 [L] ids of the prompt, whether it starts at the line start)."""
        encoded = self.tokenizer.encode(prompt)
        from_line_start = tf.equal(tf.size(encoded), 0)
        if self._has_line_start:
            return tf.cond(from_line_start, lambda: self._line_start,
                           lambda: encoded), from_line_start
        with tf.control_dependencies([tf.debugging.assert_equal(
                from_line_start, False, message="the prompt is empty and this tokenizer "
                "has no line ends (--nosp_eos), so there is no line start: give a prompt")]):
            return tf.identity(encoded), from_line_start

    def _continuation(self, ids, from_line_start, row):
        """string scalar: the text of `row` [N] after the prompt `ids` [L]
        (serving.prompts.continuation_text)."""
        head = self.tokenizer.decode(ids)
        head_len = tf.strings.length(head)
        alone = self.tokenizer.decode(row)
        full = self.tokenizer.decode(tf.concat([ids, row], 0))
        prefix = tf.equal(tf.strings.substr(full, 0, head_len), head)
        cut = tf.strings.substr(full, head_len, tf.strings.length(full) - head_len)
        return tf.where(from_line_start, alone,
                        tf.where(prefix, cut, tf.strings.join([" ", alone])))

    def _generate_sampled(self, prompt, num_tokens, num_samples, index, params, seed,
                          allow_unk):
        """The one decoding loop (samplers/decoding.py) and the texts of its tokens."""
        ids, from_line_start = self._prompt_ids(prompt)
        exclude = tf.cond(allow_unk, lambda: tf.zeros([0], tf.int32),
                          lambda: self._unknown_ids)  # [K]
        state = [tf.cast(s, tf.float32) for s in self._model.initial_state(1, 0)]
        new_ids = decode(self._next, state, ids, chunk_len=tf.constant(self._chunk_len),
                         num_tokens=num_tokens, num_samples=num_samples, seed=seed,
                         sampler_index=index, params=params, exclude_ids=exclude,
                         samplers=self._samplers, vocab_size=self._vocab,
                         state_shapes=self._invariants())["tokens"]  # [B, N]

        def continuation(row):
            return self._continuation(ids, from_line_start, row)

        continuations = tf.map_fn(continuation, new_ids, fn_output_signature=tf.string)
        return {"text": tf.strings.join([prompt, continuations]), "continuation": continuations,
                "token_ids": new_ids, "prompt_ids": ids}


def _cut_at_stops(text, stop):
    """string scalar: `text` up to the first occurrence of any string of `stop` [S]."""
    def cut(i, text):
        return i + 1, tf.strings.split(text[None], sep=stop[i]).to_tensor("")[0, 0]

    _, text = tf.while_loop(lambda i, _: i < tf.size(stop), cut, (tf.constant(0), text))
    return text


def export_saved_model(run, path, mem_len=None, overwrite=False):
    """Writes a TensorFlow SavedModel with the generate, tokenize, detokenize and serve
    signatures (see the module docstring) and its model card, `README.md`.

    Args:
        run: a `serving.generation.Run` (from `load_run` or `load_package`).
        path: output directory (must not exist unless `overwrite`).
        mem_len: memory kept in the new state; None: `run.default_mem_len`.
        overwrite: replace an existing directory.

    Returns:
        The path written.

    Raises:
        ExportError: the output exists, its parent does not, or mem_len < 0.
    """
    path = check_output(path, overwrite)
    mem_len = run.default_mem_len if mem_len is None else int(mem_len)
    if mem_len < 0:
        raise ExportError(f"mem_len={mem_len} must be >= 0")
    card = render_card(run_facts(run, "saved_model"))  # before the long tracing
    _remove_stale_temporaries(path)
    tmp = None
    try:
        # A directory at the temporary path: renamed like a file, if `path` is absent then.
        with run_dir.atomic_output(path) as tmp:
            with tempfile.TemporaryDirectory() as assets:
                module = ServingModule(run.model, mem_len, run.tokenizer, run.config.seq_len,
                                       assets)
                tf.saved_model.save(module, tmp, signatures=module.signatures())
            _write_tokenizer(run, os.path.join(tmp, TOKENIZER_DIR))
            _write_text(os.path.join(tmp, SAVED_MODEL_CARD), card)
            if os.path.exists(path):  # the old output goes only once the new one is whole
                shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
    except (run_dir.WriteError, tf.errors.OpError) as error:
        raise _write_error(path, error) from None
    finally:
        if tmp is not None:  # atomic_output removes a file, not a directory
            shutil.rmtree(tmp, ignore_errors=True)
    return path


def _remove_stale_temporaries(path):
    """What an export killed mid-write (SIGKILL, power loss) left beside `path`."""
    removed = run_dir.remove_stale_temporaries(path)
    if removed:
        logging.info("removed the unfinished export of an earlier process: %s",
                     ", ".join(sorted(removed)))


def _write_tokenizer(run, target):
    """meta.json and the tokenizer files, as in a built data directory."""
    os.makedirs(target)
    run.tokenizer.save(target)
    with open(os.path.join(target, META_FILE), "w", encoding="utf-8") as f:
        json.dump(run.meta, f, indent=1)
        f.write("\n")
