"""Fine-tuning a trained model on a text: the build, the run's paths, the Python API.

`./finetune.sh --from=MODEL --text=FILE` (finetune.py) is three steps:

1. `build_text`: the text is built as the own-text build does (valid and test split
   off its end, `--split_fraction`) but with the source model's tokenizer and id
   order (pardata/build.py `tokenizer_from`): no tokenizer is trained and the ids
   are not re-ranked by the new text's frequencies, so they index the model's
   embedding and softmax rows. The build's meta.json names the source
   ("source_model": path, kind, run, checkpoint, step).
2. train.py with `--init_weights=MODEL` (the source's config and weights,
   training/run/init_weights.py) and `--recipe=finetune` (training/setup/recipes.py).
3. train.py's `--export`: the best checkpoint as a `.keras` package carrying the
   source's tokenizer.

`finetune` is the same command from Python, returning the loaded package.
"""

import os
import subprocess
import sys
import tempfile

from pardata import build

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The source's build settings that make its tokenizer (copied into the new build's).
_TOKENIZER_SETTINGS = ("tokenizer", "vocab_size", "min_count", "sp_model_type", "sp_symbols",
                       "lowercase", "byte_eos", "sp_eos")


def run_paths(source_path, text_path, name="", root=""):
    """The run's default names: {"name", "model_dir", "data_dir", "output"}.

    `name` defaults to `<source>_<text>` (file names without their extensions, e.g.
    wt2_base_emma); the run goes to root/runs/<name>, the build to root/data/<name>,
    the package to root/runs/<name>.keras.
    """
    if not name:
        stems = [os.path.splitext(os.path.basename(os.path.normpath(p)))[0]
                 for p in (source_path, text_path)]
        name = "_".join(stems)
    return {"name": name, "model_dir": os.path.join(root, "runs", name),
            "data_dir": os.path.join(root, "data", name),
            "output": os.path.join(root, "runs", f"{name}.keras")}


def build_config(source, text_path, data_dir, batch_size=None, seq_len=None,
                 split_fraction=None, overwrite=False):
    """The BuildConfig of `text_path` with the tokenizer of `source` (a `Source`).

    Batch and segment sizes default to the source build's.
    """
    settings = source.meta.get("build") or {}
    values = {k: settings[k] for k in _TOKENIZER_SETTINGS if k in settings}
    values.setdefault("tokenizer", source.meta["tokenizer"]["kind"])
    values["vocab_size"] = source.meta["vocab_size"] if values["tokenizer"] == "sentencepiece" \
        else values.get("vocab_size", 0)
    if values["tokenizer"] == "byte":
        values.pop("vocab_size", None)
    extra = {"split_fraction": split_fraction} if split_fraction is not None else {}
    return build.BuildConfig(
        dataset="text", output_dir=data_dir, train_file=text_path,
        batch_size=batch_size or source.meta["batch_size"],
        eval_batch_size=batch_size or source.meta.get("eval_batch_size", 0),
        seq_len=seq_len or source.meta["seq_len"], overwrite=overwrite,
        tokenizer_from=source.tokenizer_sha256(), **values, **extra)


def build_text(source, text_path, data_dir, **options):
    """Builds `text_path` into `data_dir` with the source's tokenizer and ids (or finds the
    same build there); returns its meta.json. `options`: `build_config`'s.

    Raises:
        DataError: the text is missing, empty, too short to split or for one batch
            (the message names the sizes), or `data_dir` holds another build.
    """
    config = build_config(source, text_path, data_dir, **options)
    return build.build_dataset(config, tokenizer=source.tokenizer(),
                               source_model=source.describe())


def tokenizer_problem(source, tokenizer=None, vocab_size=None, flag="--from"):
    """The error line for a --tokenizer / --vocab_size that contradicts the source's, or
    None (a fine-tune keeps the source's tokenizer and ids)."""
    kind, vocab = source.meta["tokenizer"]["kind"], source.meta["vocab_size"]
    for name, given, theirs in (("tokenizer", tokenizer, kind), ("vocab_size", vocab_size,
                                                                 vocab)):
        if given is not None and given != theirs:
            return (f"--{name}={given} contradicts {flag}={source.path}, whose tokenizer is "
                    f"{kind} with {vocab} ids: drop --{name} (a fine-tune keeps the source's "
                    "tokenizer and ids, so its embedding and softmax rows stay valid)")
    return None


class FinetuneError(RuntimeError):
    """The fine-tuning command failed (the message is its `error:` line)."""


def finetune(model_or_path, texts_or_file, output=None, *, name="", log=None, **train_flags):
    """Fine-tunes a trained model on a text; returns the fine-tuned `PackagedLM`.

    Runs `finetune.py` (the command ./finetune.sh runs) in a child process, so a
    call resumes an interrupted one as the command does.

        lm = finetune("pretrained/wt2_base.keras", "my_text.txt", max_steps=2000)
        lm.generate("The", num_tokens=40, seed=1)

    Args:
        model_or_path: a `.keras` package or run directory path, or a loaded
            `PackagedLM` (saved first next to the output).
        texts_or_file: a text file's path, or the text as a str or a list of str (one
            document each, written to `<output>.txt` beside the package).
        output: the package to write (default: runs/<name>.keras in the repository).
        name: the run's name (default: `<model>_<text>`): runs/<name>, data/<name>.
        log: optional `(line) -> None` given each line the command writes to stderr.
        **train_flags: train.py flags, e.g. `max_steps=500`, `learning_rate=3e-5`
            (True/False give --flag/--noflag).

    Returns:
        The loaded fine-tuned `serving.packaged.PackagedLM`.

    Raises:
        FinetuneError: the command failed; the message is its one-line error.
    """
    from serving.packaged import PackagedLM, load_packaged_lm

    text_path = _text_file(texts_or_file, output, name)
    source = model_or_path
    if isinstance(model_or_path, PackagedLM):
        directory = os.path.dirname(os.path.abspath(output)) if output else ROOT
        source = os.path.join(directory, f"{name or 'source'}_source.keras")
        if not os.path.exists(source):
            model_or_path.save(source)
    paths = run_paths(source, text_path, name, ROOT)
    output = os.path.abspath(output or paths["output"])
    command = [sys.executable, os.path.join(ROOT, "finetune.py"),
               f"--from={os.path.abspath(source)}", f"--text={os.path.abspath(text_path)}",
               f"--output={output}", *(f"--name={name}" for _ in [0] if name),
               *_flag_args(train_flags)]
    _run(command, log)
    return load_packaged_lm(output)


def _text_file(texts_or_file, output, name):
    """The path of the text to tune on, writing given texts to a file first."""
    if isinstance(texts_or_file, (str, os.PathLike)) and os.path.isfile(texts_or_file):
        return os.fspath(texts_or_file)
    looks_like_path = isinstance(texts_or_file, str) and "\n" not in texts_or_file and \
        texts_or_file.endswith(".txt")
    if isinstance(texts_or_file, os.PathLike) or looks_like_path:
        raise FinetuneError(f"texts_or_file={texts_or_file} does not exist: give a text file, "
                            "or the text itself as a str or a list of str")
    texts = [texts_or_file] if isinstance(texts_or_file, str) else list(texts_or_file)
    from runstore import run_dir

    base = output[:-len(".keras")] if output and output.endswith(".keras") else \
        os.path.join(ROOT, "data", name or "finetune_text")
    path = base + ".txt"
    os.makedirs(os.path.dirname(path), exist_ok=True)
    content = "\n".join(t.rstrip("\n") for t in texts) + "\n"
    if not run_dir.same_content(path, content.encode("utf-8")):
        run_dir.atomic_write(path, content)
    return path


def _flag_args(values):
    args = []
    for key, value in values.items():
        if isinstance(value, bool):
            args.append(f"--{key}" if value else f"--no{key}")
        elif isinstance(value, (list, tuple)):
            args.append(f"--{key}={','.join(map(str, value))}")
        else:
            args.append(f"--{key}={value}")
    return args


def _run(command, log):
    """Runs the command, handing its stderr lines to `log`; FinetuneError on failure."""
    last = []
    with tempfile.TemporaryFile("w+", encoding="utf-8") as out:
        process = subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=subprocess.PIPE,
                                   text=True)
        for line in process.stderr:
            last = (last + [line.rstrip("\n")])[-20:]
            if log is not None:
                log(line.rstrip("\n"))
        code = process.wait()
    if code != 0:
        errors = [line for line in last if line.startswith("error:")]
        raise FinetuneError((errors[-1] if errors else "\n".join(last[-5:]))
                            or f"finetune.py exited with status {code}")

