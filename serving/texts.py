"""Strings in, strings and figures out: the Python API of a loaded model.

`PackagedLM.generate` / `.score` (serving/packaged.py) and `par.generate` /
`par.score` call these on the model's `Run`:

- `generate_texts(run, prompts, ...)`: prompt i continued as `generate.py
  --prompt=<prompts[i]> --seed=<seed + i>` with the same options continues it
  (the same tokens: the same `Decoder`, chunk length and memory), returned as
  the prompt followed by its continuation, the text generate.py prints. The
  prompts run one after another through the run's one compiled decoder (a
  prompt's memory is its own: the model takes no padding mask).
- `score_texts(run, texts, ...)`: each text scored as `evaluate.py
  --text_file=<a file holding it>` scores it (the same code on the same ids):
  perplexity, NLL per token, tokens, word perplexity, bits per byte.

The unknown-word token (WikiText's <unk>) is never generated unless
`allow_unk=True` (`serving.prompts.excluded_ids`).
"""

import os
import secrets
import tempfile

from absl import logging
import numpy as np

from samplers.base import Sampler, SamplerError
from samplers.registry import get_sampler
from serving import prompts as prompt_text
from serving.decoder import check_penalty, check_sampling_args, resolve_sampler
from serving.errors import EvaluationError, GenerationError
from serving.evaluation import evaluate_run
from serving.prompts import continuation_text, cut_at_stop, encode_prompt, excluded_ids

# The built-in sampler names of KerasHub's strategies (samplers/registry.py has them
# all: `sampler_names()`), and generate.py's default length.
SAMPLERS = ("greedy", "temperature", "top_k", "top_p")
DEFAULT_NUM_TOKENS = 100
# What `score_texts` returns of an evaluation (evaluate.py's JSON has these keys too).
SCORE_KEYS = ("perplexity", "nll", "tokens", "total_nll", "word_perplexity", "bits_per_byte",
              "words", "bytes")


def sampling_options(sampler=None, temperature=None, top_k=None, top_p=None):
    """generate.py's options of a sampler name and its arguments.

    Args:
        sampler: None (temperature, top_k and top_p as given, generate.py's
            rules), "greedy" (the argmax; takes none of them), "temperature"
            (the whole distribution at `temperature`), "top_k" (needs
            top_k >= 1) or "top_p" (needs top_p).
        temperature, top_k, top_p: None: generate.py's defaults 1.0, 0, 1.0.

    Returns:
        dict temperature, top_k, top_p, greedy.

    Raises:
        GenerationError: an unknown sampler or arguments it does not take.
    """
    given = {name: value for name, value in (("temperature", temperature), ("top_k", top_k),
                                             ("top_p", top_p)) if value is not None}
    options = dict({"temperature": 1.0, "top_k": 0, "top_p": 1.0}, **given, greedy=False)
    if sampler is None:
        return options
    if sampler not in SAMPLERS:
        raise GenerationError(f"sampler={sampler!r} must be one of {', '.join(SAMPLERS)}, or "
                              "None to combine temperature, top_k and top_p")
    if sampler == "greedy":
        if given:
            raise GenerationError(f"sampler='greedy' takes the argmax: drop "
                                  f"{', '.join(sorted(given))}")
        return dict(options, greedy=True)
    others = sorted(name for name in ("top_k", "top_p") if name in given and name != sampler)
    if others:
        raise GenerationError(f"sampler={sampler!r} does not take {', '.join(others)}: use "
                              "sampler=None to combine top_k and top_p")
    if sampler == "top_k" and not (isinstance(top_k, (int, np.integer)) and top_k >= 1):
        raise GenerationError(f"sampler='top_k' needs top_k >= 1, got top_k={top_k!r}")
    if sampler == "top_p" and top_p is None:
        raise GenerationError("sampler='top_p' needs top_p in (0, 1], e.g. top_p=0.9")
    return options


def sampler_of(sampler=None, temperature=None, top_k=None, top_p=None, sampler_args=None):
    """The registered `Sampler` of generate_texts' arguments.

    `sampler` None or one of SAMPLERS (without `sampler_args`): `sampling_options`'
    rules, the same draws. Another registered name takes its parameters from
    `sampler_args` (dict name -> value) and from `temperature`, `top_k`, `top_p` when
    given; a `samplers.base.Sampler` instance is used as it is.

    Raises:
        GenerationError: an unknown sampler, parameter or value, named.
    """
    if isinstance(sampler, Sampler) and not sampler_args and (temperature, top_k, top_p) == (
            None, None, None):
        return resolve_sampler(sampler)
    if (sampler is None or sampler in SAMPLERS) and not sampler_args:
        options = sampling_options(sampler, temperature, top_k, top_p)
        check_sampling_args(1, options["temperature"], options["top_k"], options["top_p"])
        if sampler in (None, "greedy"):
            return resolve_sampler(None, **options)
        values = {"temperature": options["temperature"]}
        if sampler != "temperature":
            values[sampler] = options[sampler]
        return get_sampler(sampler, **values)
    if not isinstance(sampler, str):
        raise GenerationError(f"sampler={sampler!r} must be a sampler name (a str) or a "
                              "samplers.base.Sampler without other sampling arguments")
    if sampler_args is not None and not isinstance(sampler_args, dict):
        raise GenerationError(f"sampler_args={sampler_args!r} must be a dict name -> value")
    params = dict(sampler_args or {})
    for name, value in (("temperature", temperature), ("top_k", top_k), ("top_p", top_p)):
        if value is not None:
            params[name] = value
    try:
        return get_sampler(sampler, **params)
    except SamplerError as error:
        raise GenerationError(str(error)) from None


def _as_list(values, name):
    """(list of str, whether a single str was given)."""
    single = isinstance(values, str)
    values = [values] if single else list(values) if isinstance(values, (list, tuple)) else None
    if not values or not all(isinstance(v, str) for v in values):
        raise GenerationError(f"{name} must be a string or a non-empty list of strings")
    return values, single


def _new_tokens(prompt, max_length, num_tokens, index):
    if max_length is None:
        return DEFAULT_NUM_TOKENS if num_tokens is None else num_tokens
    if isinstance(max_length, bool) or not isinstance(max_length, (int, np.integer)):
        raise GenerationError(f"max_length={max_length!r} must be an integer")
    if max_length <= len(prompt.ids):
        raise GenerationError(f"max_length={max_length} counts the prompt's tokens (KerasHub's "
                              f"meaning) and prompts[{index}] has {len(prompt.ids)}: give a "
                              "larger max_length, or num_tokens (new tokens only)")
    return int(max_length) - len(prompt.ids)


def _generation_inputs(run, texts, max_length, num_tokens, sampler, temperature, top_k, top_p,
                       seed, sampler_args, stop, repetition_penalty):
    """(sampler, seed, encoded prompts, new tokens per prompt, stop strings, stop ids) of
    generate_texts' arguments, checked."""
    if max_length is not None and num_tokens is not None:
        raise GenerationError("give max_length (the prompt's tokens included, as KerasHub) or "
                              "num_tokens (new tokens, as generate.py), not both")
    chosen = sampler_of(sampler, temperature, top_k, top_p, sampler_args)
    check_sampling_args(DEFAULT_NUM_TOKENS if num_tokens is None else num_tokens,
                        num_samples=len(texts))
    stops = prompt_text.stop_strings(stop)
    check_penalty(repetition_penalty)
    if seed is None:
        seed = secrets.randbits(31)
        logging.info("seed %d (pass seed=%d to reproduce)", seed, seed)
    elif isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not (
            0 <= seed < 2**62 - len(texts)):
        raise GenerationError(f"seed={seed!r} must be an integer in [0, 2**62)")
    encoded = []
    for i, text in enumerate(texts):
        try:
            encoded.append(encode_prompt(run.tokenizer, text))
        except GenerationError as error:
            raise GenerationError(f"prompts[{i}]: {error}" if len(texts) > 1 else str(error)) \
                from None
    unknown = sorted({word for prompt in encoded for word in prompt.unknown_words})
    if unknown:
        logging.warning("prompt words unknown to the tokenizer, encoded as <unk>: %s",
                        " ".join(unknown))
    lengths = [_new_tokens(prompt, max_length, num_tokens, i) for i, prompt in enumerate(encoded)]
    return (chosen, int(seed), encoded, lengths, stops,
            prompt_text.stop_token_ids(run.tokenizer, stops))


def generate_texts(run, prompts, max_length=None, *, num_tokens=None, sampler=None,
                   temperature=None, top_k=None, top_p=None, seed=None, allow_unk=False,
                   mem_len=None, sampler_args=None, stop=None, repetition_penalty=1.0,
                   batch_size=32, chunk_len=None):
    """Continues each prompt (see the module docstring).

    Args:
        run: a `serving.runs.Run`.
        prompts: a str, or a list of str (an empty one starts at a line start).
        max_length: tokens of each result, the prompt's included (KerasHub's
            `max_length`); or
        num_tokens: new tokens per prompt (generate.py's --num_tokens).
            Neither: 100 new tokens.
        sampler, temperature, top_k, top_p: see `sampling_options`; `sampler`
            may also name any registered sampler (samplers/registry.py), its
            parameters in `sampler_args` (see `sampler_of`), or be a
            `samplers.base.Sampler` instance.
        seed: int >= 0, prompt i is drawn with seed + i (generate.py's rule for
            its samples); None: a random seed, logged.
        allow_unk: let the unknown-word token be generated.
        mem_len: memory positions; None: the run's eval_mem_len.
        sampler_args: dict of the named sampler's parameters.
        stop: a str or list of str: each continuation ends before the first
            of them it holds ("\\n": at the end of the line); None: no stop.
        repetition_penalty: > 0, 1 for none (`samplers.decoding.penalize`).
        batch_size: prompts decoded together (they run as one batch: see
            `serving.decoder.Decoder.generate_many`).
        chunk_len: prompt tokens per forward pass; None: the run's seq_len.

    Returns:
        The prompt followed by its continuation: a str for a str, else a list.

    Raises:
        GenerationError: an invalid argument, named.
    """
    texts, single = _as_list(prompts, "prompts")
    chosen, seed, encoded, lengths, stops, stop_ids = _generation_inputs(
        run, texts, max_length, num_tokens, sampler, temperature, top_k, top_p, seed,
        sampler_args, stop, repetition_penalty)
    decoder, exclude = run.decoder(mem_len), excluded_ids(run.tokenizer, allow_unk)
    rows = decoder.generate_many(
        [prompt.ids for prompt in encoded], lengths, seed=seed, sampler=chosen,
        exclude_ids=exclude, stop_ids=stop_ids, repetition_penalty=repetition_penalty,
        chunk_len=chunk_len or run.config.seq_len, batch_size=batch_size)
    results = [text + cut_at_stop(continuation_text(run.tokenizer, prompt, tokens), stops)
               for text, prompt, tokens in zip(texts, encoded, rows)]
    return results[0] if single else results


def stream_text(run, prompt, max_length=None, *, num_tokens=None, sampler=None,
                temperature=None, top_k=None, top_p=None, seed=None, allow_unk=False,
                mem_len=None, sampler_args=None, stop=None, repetition_penalty=1.0,
                chunk_len=None):
    """Yields the continuation `generate_texts(run, prompt, ...)` returns, piece by piece
    as it is decoded: the pieces joined are the continuation (the prompt is not yielded).

    A piece is yielded once the text decoded so far extends the text before it
    (a sentencepiece or byte token may change how the previous one reads), and
    never past a stop string: the text is held back while it may be one's start.
    """
    if not isinstance(prompt, str):
        raise GenerationError("prompt must be a string (stream one prompt at a time)")
    chosen, seed, encoded, lengths, stops, stop_ids = _generation_inputs(
        run, [prompt], max_length, num_tokens, sampler, temperature, top_k, top_p, seed,
        sampler_args, stop, repetition_penalty)
    encoded = encoded[0]
    pieces = run.decoder(mem_len).stream(
        encoded.ids, lengths[0], seed=seed, sampler=chosen, stop_ids=stop_ids,
        exclude_ids=excluded_ids(run.tokenizer, allow_unk),
        chunk_len=chunk_len or run.config.seq_len, repetition_penalty=repetition_penalty)
    tokens, given = [], ""
    hold = max((len(s) - 1 for s in stops), default=0)  # what may start a stop string
    for new in pieces:
        tokens.extend(int(i) for i in new)
        text = continuation_text(run.tokenizer, encoded, tokens)
        final = cut_at_stop(text, stops)
        if final != text:  # a stop string: the rest is never shown
            if len(final) > len(given):
                yield final[len(given):]
            return
        # An unfinished UTF-8 character (a byte token) reads as U+FFFD until it is whole.
        safe = len(text.rstrip("\ufffd")) - hold
        if safe > len(given) and text.startswith(given):
            yield text[len(given):safe]
            given = text[:safe]
    text = cut_at_stop(continuation_text(run.tokenizer, encoded, tokens), stops)
    if len(text) > len(given):
        yield text[len(given):]


def score_texts(run, texts, *, batch_size=None, seq_len=None, mem_len=None):
    """Scores each text as evaluate.py --text_file scores a file holding it.

    Args:
        run: a `serving.runs.Run`.
        texts: a str, or a list of str (each of at least two tokens).
        batch_size, seq_len, mem_len: evaluate.py's flags; None: its defaults
            (the data's eval batch size, the run's seq_len and eval_mem_len).

    Returns:
        A dict of SCORE_KEYS for a str (`perplexity`, `nll` per token,
        `tokens` scored, ...), else a list of them.

    Raises:
        EvaluationError: a text too short to score, or a bad setting.
    """
    try:
        texts, single = _as_list(texts, "texts")
    except GenerationError as error:
        raise EvaluationError(str(error)) from None
    results = []
    with tempfile.TemporaryDirectory() as directory:
        for i, text in enumerate(texts):
            path = os.path.join(directory, f"texts[{i}]")  # the name evaluate_run logs
            try:
                with open(path, "w", encoding="utf-8", newline="") as f:
                    f.write(text)
            except UnicodeEncodeError as error:
                raise EvaluationError(f"texts[{i}] is not valid Unicode text (character "
                                      f"{error.start})") from None
            try:
                result = evaluate_run(run, text_file=path, batch_size=batch_size,
                                      seq_len=seq_len, mem_len=mem_len)
            except EvaluationError as error:
                message = str(error).replace(f"--text_file={path}", f"texts[{i}]")
                raise EvaluationError(message.replace("--", "")) from None
            results.append({key: result[key] for key in SCORE_KEYS})
    return results[0] if single else results
