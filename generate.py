r"""Generates text from a trained run or an exported `.keras` file, with the model's
state as a cache.

The prompt is run once; each new token then costs one forward pass of length
1 over the cached state (Transformer-XL memories, SHA-RNN LSTM states and
attention memory). Works for every model family, for supernets
(deterministic evaluation architecture) and fixed architectures, with any
tokenizer.

Usage:
    python3 generate.py --model=pretrained/wt2_base.keras --prompt="The game" --seed=1
    python3 generate.py --model_dir=runs/search --prompt="The game" --num_tokens=50
    echo "The game was released in" | python3 generate.py --model_dir=runs/search \
        --prompt_file=- --top_p=0.9 --temperature=0.8 --seed=1 --num_samples=3
    python3 generate.py --model_dir=runs/search --prompt="The game" --greedy
    python3 generate.py --model_dir=runs/search --prompt="The game" --sampler=top_k \
        --sampler_args=top_k=40,temperature=0.9

The unknown-word token (WikiText's `<unk>`: `Tokenizer.unknown_ids()`) is never
generated unless `--allow_unk` is given.

`--model` takes a `.keras` file written by export.py: the model, its tokenizer
and the run's generation settings in one file (serving/packaged.py), so it
needs neither the run directory nor the built data; for the same seed and
settings it draws the tokens `--model_dir` draws from the checkpoint it was
exported from.

Prints the prompt followed by each sample (with a header line per sample when
--num_samples > 1). Errors a user can cause end in one line `error: ...` on
stderr and exit status 1.
"""

import os
import secrets
import sys

import tools.in_environment  # noqa: F401  (one line, not a traceback, outside the environment)

from absl import app, flags, logging

import pardata.quiet  # noqa: F401  (TensorFlow start-up noise; before TF is imported)
from serving import model_flags

model_flags.define(flags.FLAGS)
flags.DEFINE_string("prompt", "", "Text to continue; empty starts at a line start (<eos>), "
                    "which a --nosp_eos build does not have.")
flags.DEFINE_string("prompt_file", None, "UTF-8 file whose content is the prompt (instead "
                    "of --prompt); - reads standard input.")
flags.DEFINE_integer("num_tokens", 100, "Tokens to generate per sample (>= 1).")
flags.DEFINE_float("temperature", 1.0, "Divides the log-probabilities (> 0; < 1 is more "
                   "conservative).")
flags.DEFINE_integer("top_k", 0, "Sample among the k most likely tokens (0: all).")
flags.DEFINE_float("top_p", 1.0, "Nucleus sampling: the smallest most likely set of mass "
                   ">= top_p, in (0, 1] (1: all).")
flags.DEFINE_boolean("greedy", False, "Argmax decoding (ignores temperature, top_k, top_p).")
flags.DEFINE_string("sampler", None, "A registered sampler by name (samplers/registry.py: "
                    "greedy, sample, temperature, top_k, top_p, or one a program registered) "
                    "instead of --greedy/--temperature/--top_k/--top_p; its parameters in "
                    "--sampler_args.")
flags.DEFINE_string("sampler_args", "", "Parameters of --sampler as name=value,...: e.g. "
                    "--sampler=top_p --sampler_args=top_p=0.9,temperature=0.8.")
flags.DEFINE_integer("seed", None, "Seed (>= 0) for a reproducible sample; sample i uses "
                     "seed + i. Default: random (logged).")
flags.DEFINE_integer("mem_len", None, "Memory positions per block; default: the run's "
                     "eval_mem_len (its mem_len if that is 0).")
flags.DEFINE_integer("chunk_len", None, "Prompt tokens per forward pass; default: the run's "
                     "seq_len.")
flags.DEFINE_integer("num_samples", 1, "Samples of the same prompt, generated together.")
flags.DEFINE_boolean("each_line", False, "Each line of --prompt_file (or of --prompt) is its "
                     "own prompt; they are decoded as one batch (prompt i with seed + i, the "
                     "texts one at a time would give).")
flags.DEFINE_integer("batch_size", 32, "Prompts decoded together with --each_line (bounds "
                     "the memory for long lists).")
flags.DEFINE_multi_string("stop", None, "End each continuation before this text (repeat the "
                          "flag for several); \\n is the end of the line, e.g. --stop='\\n'.")
flags.DEFINE_float("repetition_penalty", 1.0, "Multiplies the log-probabilities of tokens "
                   "already in the prompt or the continuation (> 0; 1: none; 1.2 discourages "
                   "repeats).")
flags.DEFINE_boolean("stream", False, "Print the continuation as it is generated (one prompt, "
                     "one sample).")
flags.DEFINE_boolean("allow_unk", False, "Let the model generate the unknown-word token "
                     "(WikiText's <unk>); by default it is never drawn.")

FLAGS = flags.FLAGS


class FlagError(ValueError):
    """A flag value or combination the user has to fix."""


def _read_prompt():
    """The prompt text from --prompt or --prompt_file."""
    if FLAGS.prompt_file is None:
        return FLAGS.prompt
    if FLAGS.prompt:
        raise FlagError("give either --prompt or --prompt_file, not both")
    try:
        if FLAGS.prompt_file == "-":
            data = sys.stdin.buffer.read()
        else:
            with open(FLAGS.prompt_file, "rb") as f:
                data = f.read()
    except OSError as error:
        raise FlagError(
            f"cannot read --prompt_file={FLAGS.prompt_file}: {error.strerror}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise FlagError(f"--prompt_file={FLAGS.prompt_file} is not UTF-8 text (bad byte at "
                        f"offset {error.start}): convert it to UTF-8") from None


def _prompts(text):
    """The prompts of the text read: itself, or with --each_line its non-empty lines."""
    if not FLAGS.each_line:
        return [text]
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        source = "--prompt" if FLAGS.prompt_file is None else f"--prompt_file={FLAGS.prompt_file}"
        raise FlagError(f"{source} has no non-empty line to use as a prompt (--each_line)")
    return lines


def _stops():
    """--stop's strings with \\n, \\t and \\\\ read as the characters they name."""
    if not FLAGS.stop:
        return None
    stops = []
    for value in FLAGS.stop:
        if not value:
            raise FlagError("--stop is empty: give the text to stop at, e.g. --stop='\\n'")
        stops.append(value.replace("\\\\", "\0").replace("\\n", "\n")
                     .replace("\\t", "\t").replace("\0", "\\"))
    return stops


def _number(text):
    """int or float of a --sampler_args value (FlagError if neither)."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    raise FlagError(f"--sampler_args={FLAGS.sampler_args}: {text!r} is not a number")


def _sampler():
    """The registered sampler of --sampler/--sampler_args, or None (the keyword flags)."""
    from samplers.base import SamplerError
    from samplers.registry import get_sampler, sampler_names

    if FLAGS.sampler is None:
        if FLAGS.sampler_args:
            raise FlagError("--sampler_args needs --sampler (the sampler they are for)")
        return None
    keyword = [f"--{name}" for name, default in (("temperature", 1.0), ("top_k", 0),
                                                   ("top_p", 1.0), ("greedy", False))
               if getattr(FLAGS, name) != default]
    if keyword:
        raise FlagError(f"--sampler={FLAGS.sampler} takes its parameters in --sampler_args, "
                        f"not {', '.join(keyword)}")
    params = {}
    for item in filter(None, FLAGS.sampler_args.split(",")):
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise FlagError(f"--sampler_args={FLAGS.sampler_args}: {item!r} is not "
                            "name=value")
        params[name.strip()] = _number(value.strip())
    try:
        return get_sampler(FLAGS.sampler, **params)
    except SamplerError as error:
        if FLAGS.sampler not in sampler_names():
            raise FlagError(f"--{error}") from None
        raise FlagError(f"--sampler_args={FLAGS.sampler_args}: {error}") from None


def _generate():
    from serving import generation, texts

    try:
        generation.check_sampling_args(FLAGS.num_tokens, FLAGS.temperature, FLAGS.top_k,
                                       FLAGS.top_p, FLAGS.num_samples)
    except generation.GenerationError as error:
        raise FlagError(f"--{error}") from None  # messages start with the argument name
    if FLAGS.mem_len is not None and FLAGS.mem_len < 0:
        raise FlagError(f"--mem_len={FLAGS.mem_len} must be >= 0")
    if FLAGS.seed is not None and not 0 <= FLAGS.seed < 2**62 - FLAGS.num_samples:
        raise FlagError(f"--seed={FLAGS.seed} must be in [0, 2**62)")
    if FLAGS.chunk_len is not None and FLAGS.chunk_len < 1:
        raise FlagError(f"--chunk_len={FLAGS.chunk_len} must be >= 1")
    sampler = _sampler()
    problem = model_flags.problem(FLAGS)
    if problem:
        raise FlagError(problem)
    prompts = _prompts(_read_prompt())
    if len(prompts) > 1 and FLAGS.num_samples > 1:
        raise FlagError(f"--num_samples={FLAGS.num_samples} takes one prompt, and --each_line "
                        f"gave {len(prompts)}: drop --num_samples (each prompt gets one sample)")
    if FLAGS.stream and (FLAGS.num_samples > 1 or FLAGS.each_line):
        raise FlagError("--stream prints one prompt's one sample: drop --num_samples or "
                        "--each_line, or --stream")
    if FLAGS.batch_size < 1:
        raise FlagError(f"--batch_size={FLAGS.batch_size} must be >= 1")
    if not FLAGS.repetition_penalty > 0:
        raise FlagError(f"--repetition_penalty={FLAGS.repetition_penalty} must be > 0 (1: none)")
    stops = _stops()
    run = generation.load(FLAGS.model_dir or None, FLAGS.model or None, FLAGS.checkpoint)
    seed = secrets.randbits(31) if FLAGS.seed is None else FLAGS.seed
    if not FLAGS.greedy and FLAGS.sampler != "greedy":
        logging.info("seed %d (pass --seed=%d to reproduce)", seed, seed)
    logging.info("%s %s, mem_len %s", "model" if run.package else "checkpoint",
                 run.checkpoint_path,
                 FLAGS.mem_len if FLAGS.mem_len is not None else run.default_mem_len)
    chosen = sampler or generation.resolve_sampler(None, FLAGS.temperature, FLAGS.top_k,
                                                   FLAGS.top_p, FLAGS.greedy)
    options = dict(num_tokens=FLAGS.num_tokens, sampler=chosen, seed=seed,
                   allow_unk=FLAGS.allow_unk, mem_len=FLAGS.mem_len, stop=stops,
                   repetition_penalty=FLAGS.repetition_penalty, chunk_len=FLAGS.chunk_len)
    try:
        if FLAGS.num_samples > 1:
            _print_samples(run, prompts[0], chosen, seed, stops)
        elif FLAGS.stream:
            print(prompts[0], end="", flush=True)
            for piece in texts.stream_text(run, prompts[0], **options):
                print(piece, end="", flush=True)
            print()
        else:
            results = texts.generate_texts(run, prompts, batch_size=FLAGS.batch_size, **options)
            for i, result in enumerate(results):
                if len(prompts) > 1:
                    print(f"=== prompt {i} (seed {seed + i}) ===")
                print(result)
    except generation.GenerationError as error:
        source = "--prompt" if FLAGS.prompt_file is None else f"--prompt_file={FLAGS.prompt_file}"
        raise FlagError(f"{source}: {error}") from None


def _print_samples(run, text, sampler, seed, stops):
    """--num_samples continuations of one prompt, generated together (sample i: seed + i)."""
    from serving import generation
    from serving import prompts as prompt_text

    prompt = generation.encode_prompt(run.tokenizer, text)
    if prompt.unknown_words:
        logging.warning("prompt words unknown to the tokenizer, encoded as <unk>: %s",
                        " ".join(prompt.unknown_words))
    tokens = run.decoder(FLAGS.mem_len).generate(
        prompt.ids, FLAGS.num_tokens, num_samples=FLAGS.num_samples, seed=seed, sampler=sampler,
        exclude_ids=generation.excluded_ids(run.tokenizer, FLAGS.allow_unk),
        stop_ids=prompt_text.stop_token_ids(run.tokenizer, stops or ()),
        repetition_penalty=FLAGS.repetition_penalty,
        chunk_len=run.config.seq_len if FLAGS.chunk_len is None else FLAGS.chunk_len)
    for i, row in enumerate(tokens):
        print(f"=== sample {i} (seed {seed + i}) ===")
        continuation = generation.continuation_text(run.tokenizer, prompt, row[row >= 0])
        print(text + prompt_text.cut_at_stop(continuation, stops or ()))


def main(argv):
    if len(argv) > 1:
        print(f"error: unexpected arguments {argv[1:]}; all options are --flags", file=sys.stderr)
        return 1
    import data_utils
    from serving.generation import GenerationError
    from training.run import interrupt

    status, line = interrupt.run_guarded(
        _generate, (FlagError, GenerationError, data_utils.DataError))
    if line:
        print(line, file=sys.stderr)
    return status


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    app.run(main)
