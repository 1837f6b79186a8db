"""The model card of an export: Markdown read from the run's files, never invented.

Every export writes one (serving/export.py): inside the package (a `.keras` file's
`PackagedLM` keeps its text in its config, `PackagedLM.card`; a SavedModel directory
holds it as `README.md`) and, for a `.keras` file, beside it (`runs/x.keras` ->
`runs/x.md`, `card_path`). What it says and where each fact comes from:

- the data and its build: the build's meta.json (dataset, source files, tokenizer,
  vocabulary, per split the ids, words, bytes and lines; the build's settings; its
  command when meta.json records one);
- the model: its family (the registry's description, its `summary_fields`), its whole
  config, the parameters of each of its variable groups (model/interface.py);
- the training: the run's config.json (its command when recorded, the main settings,
  the whole file), metrics.json (the steps trained and planned) and training_log.log
  (the time of the training steps, from their logged tokens/s);
- the results: metrics.json's best and last checkpoints, each with its valid and
  test perplexity, word perplexity and bits per byte;
- the export: its format, the run, checkpoint and step it came from, the storage dtype;
- a fixed paragraph on the intended use and the limits.

A fact whose file is missing (a run stopped before its metrics.json, a package exported
before cards existed) reads "not recorded". The facts of the run directory that the
package holds nowhere else (metrics.json, the training time: `read_records`) travel in
the package too (`PackagedLM.records`), so exporting a package again keeps them.
Family-agnostic: the model is described through the registry and the interface only.
Pure Python (no TensorFlow import).
"""

import dataclasses
import json
import os
import shlex

from absl import logging

from model.families import FAMILIES
from runstore import run_dir

NOT_RECORDED = "not recorded"
# The export formats a card describes: format -> what the output is.
FORMATS = {
    "keras": "a Keras 3 `.keras` file holding a `par>PackagedLM` (serving/packaged.py)",
    "saved_model": "a TensorFlow SavedModel directory (serving/export.py), this card its "
                   "README.md",
}
# The SavedModel's card, inside its directory.
SAVED_MODEL_CARD = "README.md"
# The trainer's settings a card names in its training section (the rest: the whole config).
TRAINING_SETTINGS = ("preset", "optimizer", "learning_rate", "lr_schedule", "warmup_steps",
                     "min_lr", "weight_decay", "clip_norm", "batch_size", "seq_len", "epochs",
                     "max_steps", "ema_decay", "precision", "eval_mem_len")
INTENDED_USE = (
    "A small research model, trained on the data above only. It continues text like its "
    "training data (English text of that kind) and is meant for trying the project's "
    "generation, evaluation and serving code and for comparing language models. It is not "
    "for production use and not a source of facts: it repeats the topics and biases of its "
    "training text and can reproduce passages of it; the licence of that text applies to "
    "the weights. Its perplexity is measured on its own test split only and says little "
    "about other text.")


def card_path(path):
    """The card beside a `.keras` output: `runs/x.keras` -> `runs/x.md`."""
    return os.path.splitext(os.fspath(path))[0] + ".md"


@dataclasses.dataclass(frozen=True)
class CardFacts:
    """What a card is made of.

    Attributes:
        meta: the build's meta.json (dict).
        run_config: the run's config.json as the package stores it (paths as base names).
        family: the model family's registry name.
        parameters: variable group -> number of parameters (`parameter_counts`).
        source: dict with "run", "checkpoint" and "step" (`export_source`).
        storage_dtype: dtype of the stored weights.
        records: `read_records`'s dict ({} when the package has none).
        export_format: a key of FORMATS.
    """

    meta: dict
    run_config: dict
    family: str
    parameters: dict
    source: dict
    storage_dtype: str
    records: dict
    export_format: str


# ------------------------------------------------------------- reading the run


def _read_json(path):
    """The JSON of `path`, or None when it is missing or unreadable (logged)."""
    if not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
        if not isinstance(value, dict):
            raise ValueError("not a JSON object")
        return value
    except (OSError, ValueError) as error:
        logging.warning("the model card cannot read %s (%s): its figures are not recorded",
                        path, error)
        return None


def _training_time(model_dir, tokens_per_step):
    """{"seconds", "steps"} of the steps training_log.log times, or None.

    Each logged line gives the tokens/s of the steps since the line before (steps only:
    evaluations and saves are not timed), so the steps took
    `(step - previous step) * tokens_per_step / tokens_per_sec` seconds.
    """
    path = os.path.join(model_dir, run_dir.TRAINING_LOG)
    if not tokens_per_step or not os.path.isfile(path):
        return None
    seconds, previous = 0.0, 0
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                if not line.endswith("\n"):  # a write cut short
                    break
                fields = dict(item.split("=", 1) for item in line.split() if "=" in item)
                if "tokens_per_sec" not in fields:  # a plug-in's event line
                    continue
                step, rate = int(fields["step"]), float(fields["tokens_per_sec"])
                if rate > 0 and step > previous:
                    seconds += (step - previous) * tokens_per_step / rate
                previous = max(previous, step)
    except (OSError, ValueError, KeyError) as error:
        logging.warning("the model card cannot read %s (%s): the training time is not "
                        "recorded", path, error)
        return None
    return {"seconds": seconds, "steps": previous} if previous else None


def read_records(model_dir, meta, settings):
    """The facts of a run directory a package holds nowhere else.

    Args:
        model_dir: the run directory ("" for none).
        meta: the build's meta.json (its train batch size).
        settings: the run's config.json (its seq_len).

    Returns:
        {"metrics": metrics.json or None, "training_time": {"seconds", "steps"} or None,
        "command": the command.json's command line (train.py writes it) or None}.
    """
    if not model_dir:
        return {"metrics": None, "training_time": None, "command": None}
    batch = ((meta or {}).get("splits") or {}).get("train", {}).get("batch_size")
    tokens_per_step = int(batch) * int(settings.get("seq_len") or 0) if batch else 0
    command = _read_json(os.path.join(model_dir, run_dir.COMMAND_FILE)) or {}
    argv = command.get("argv")
    return {"metrics": _read_json(os.path.join(model_dir, run_dir.METRICS_FILE)),
            "training_time": _training_time(model_dir, tokens_per_step),
            "command": shlex.join(["python3", *argv]) if isinstance(argv, list) and argv
            and all(isinstance(a, str) for a in argv) else None}


def sanitized_run_config(config):
    """A `RunConfig`'s config.json as a dict without the machine's paths (base names)."""
    values = config.to_dict()
    for name in ("model_dir", "data_dir"):
        values[name] = os.path.basename(os.path.normpath(values[name])) or values[name]
    values["logdir"] = ""
    return values


def export_source(run):
    """{"run", "checkpoint", "step"} of a loaded `serving.runs.Run` (a package's own)."""
    if run.package is not None:
        return dict(run.package.source)
    model_dir = run.model_dir or run.config.model_dir
    return {"run": os.path.basename(os.path.normpath(model_dir)),
            "checkpoint": os.path.relpath(run.checkpoint_path, run.model_dir)
            if run.model_dir else os.path.basename(run.checkpoint_path),
            "step": run_dir.checkpoint_step(run.checkpoint_path)}


def parameter_counts(model):
    """Variable group -> its number of parameters (model/interface.py `variable_groups`)."""
    return {name: sum(int(_size(v.shape)) for v in variables)
            for name, variables in model.variable_groups().items()}


def _size(shape):
    size = 1
    for dim in shape:
        size *= int(dim)
    return size


def run_facts(run, export_format, storage_dtype="float32"):
    """The `CardFacts` of a loaded `serving.runs.Run` exported in `export_format`."""
    settings = sanitized_run_config(run.config)
    if run.package is not None:
        records = run.package.records
    else:
        records = read_records(run.model_dir, run.meta, run.config.to_dict())
    return CardFacts(meta=run.meta or {}, run_config=settings, family=run.model.family,
                     parameters=parameter_counts(run.model), source=export_source(run),
                     storage_dtype=storage_dtype, records=records or {},
                     export_format=export_format)


# ------------------------------------------------------------------- rendering


def _number(value, digits=None):
    """'12,345', '42.143' (digits), or NOT_RECORDED for None."""
    if value is None:
        return NOT_RECORDED
    if digits is None:
        return f"{int(value):,}"
    return f"{float(value):.{digits}f}"


def _duration(seconds):
    """'1h02m', '3m05s' or '4.2s'."""
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def _settings(values, names=None):
    """'name=value, ...' of `names` (default: every key but the nested ones)."""
    names = names or [k for k in sorted(values) if not isinstance(values[k], dict)]
    shown = [f"{name}={json.dumps(values[name])}" for name in names if name in values]
    return ", ".join(shown) if shown else NOT_RECORDED


def _json_block(title, value):
    """A folded Markdown block holding `value` as JSON."""
    return ["<details><summary>" + title + "</summary>", "", "```json",
            json.dumps(value, indent=1, sort_keys=True), "```", "", "</details>"]


def _split_figures(metrics, source_step):
    """(label, step, split, figures) rows of metrics.json's best and last checkpoints."""
    rows, seen = [], set()
    for label in ("best", "last"):
        entry = (metrics or {}).get(label) or {}
        step = entry.get("step")
        if step is None or step in seen:
            continue
        seen.add(step)
        name = f"{label} (step {step:,})"
        if step == source_step:
            name += ", exported"
        for split in ("valid", "test"):
            if isinstance(entry.get(split), dict):
                rows.append((name, step, split, entry[split]))
    return rows


def _no_metrics(facts):
    """Why a card has no metrics.json: "not recorded (...)"."""
    if not facts.records:
        return f"{NOT_RECORDED} (a package written before model cards)"
    return f"{NOT_RECORDED} (no metrics.json in the run directory: an unfinished run)"


def _headline(facts):
    """The summary table's result line: the exported checkpoint's recorded figures."""
    metrics = facts.records.get("metrics")
    step = facts.source.get("step")
    found = {split: figures for _, at, split, figures in _split_figures(metrics, step)
             if at == step}
    if not metrics:
        return _no_metrics(facts)
    if not found:
        return f"{NOT_RECORDED} (metrics.json has no figures of step {step})"
    parts = []
    for split in ("valid", "test"):
        if split in found:
            figures = found[split]
            part = f"{split} perplexity **{_number(figures.get('perplexity'), 3)}**"
            if "word_perplexity" in figures:
                part += f" (word perplexity {_number(figures['word_perplexity'], 3)})"
            parts.append(part)
    return "; ".join(parts) + f", at step {step:,}"


def _summary_section(facts):
    meta, tokenizer = facts.meta, facts.meta.get("tokenizer") or {}
    source = facts.source
    total = sum(facts.parameters.values())
    groups = ""
    if len(facts.parameters) > 1:
        groups = " (" + ", ".join(f"{name} {count:,}" for name, count in
                                  facts.parameters.items()) + ")"
    time = facts.records.get("training_time")
    metrics = facts.records.get("metrics") or {}
    trained = _no_metrics(facts) if not metrics else (
        f"{_number(metrics.get('step'))} steps (planned {_number(metrics.get('planned_steps'))})")
    if time:
        trained += f", the steps taking about {_duration(time['seconds'])}"
    return [
        "| | |", "|---|---|",
        f"| Format | {FORMATS[facts.export_format]} |",
        f"| Source | run `{source.get('run', NOT_RECORDED)}`, checkpoint "
        f"`{source.get('checkpoint', NOT_RECORDED)}`, step {_number(source.get('step'))} |",
        f"| Weights | {total:,} parameters{groups}, stored in {facts.storage_dtype}, "
        "computed in float32 |",
        f"| Model | {_family_line(facts)} |",
        f"| Data | `{meta.get('dataset', NOT_RECORDED)}`, "
        f"{_number(_split(meta, 'train').get('words'))} training words |",
        f"| Tokenizer | {tokenizer.get('kind', NOT_RECORDED)}, "
        f"{_number(meta.get('vocab_size'))} ids |",
        f"| Training | {trained} |",
        f"| Result | {_headline(facts)} |",
    ]


def _split(meta, name):
    return (meta.get("splits") or {}).get(name) or {}


def _split_names(meta):
    """The build's splits: train, valid, test first, then any other."""
    names = list(meta.get("splits") or {})
    order = ("train", "valid", "test")
    return [n for n in order if n in names] + sorted(n for n in names if n not in order)


def _family_line(facts):
    """'<family>: <description>; <summary field> <value>, ...'."""
    family = FAMILIES.get(facts.family)
    model = facts.run_config.get("model") or {}
    line = f"`{facts.family}`"
    if family is None:
        return line
    line += f": {family.description}"
    sizes = [f"{name} {json.dumps(model[name])}" for name in family.summary_fields
             if name in model]
    return line + ("; " + ", ".join(sizes) if sizes else "")


def _data_section(meta):
    """The build: its sources, tokenizer, splits, settings and command."""
    lines = ["## Data", ""]
    build = meta.get("build") or {}
    sources = build.get("sources") or {}
    tokenizer = meta.get("tokenizer") or {}
    lines.append(f"Dataset `{meta.get('dataset', NOT_RECORDED)}`, vocabulary of "
                 f"{_number(meta.get('vocab_size'))} ids, ids ranked by training frequency.")
    lines.append("Tokenizer (meta.json): " + _settings(
        tokenizer, [k for k in sorted(tokenizer) if k != "files"]) + ".")
    lines += ["", "| split | source file | ids | words | bytes | lines |",
              "|---|---|---:|---:|---:|---:|"]
    for name in _split_names(meta):
        split, source = _split(meta, name), sources.get(name) or [NOT_RECORDED]
        lines.append(f"| {name} | `{source[0]}` | {_number(split.get('ids'))} | "
                     f"{_number(split.get('words'))} | {_number(split.get('bytes'))} | "
                     f"{_number(split.get('lines'))} |")
    command = meta.get("command") or build.get("command")
    lines += ["", f"Build command: {f'`{command}`' if command else NOT_RECORDED}.",
              "Build settings (meta.json `build`): "
              + _settings({k: v for k, v in build.items() if k != "sources"}) + "."]
    return lines


def _model_section(facts):
    lines = ["## Model", "", _family_line(facts) + ".", ""]
    for name, count in facts.parameters.items():
        lines.append(f"- `{name}`: {count:,} parameters")
    lines.append("")
    lines += _json_block("The model config", facts.run_config.get("model") or {})
    return lines


def _training_section(facts):
    settings = facts.run_config
    metrics = facts.records.get("metrics")
    time = facts.records.get("training_time")
    command = facts.records.get("command") or settings.get("command")
    lines = ["## Training", "",
             f"Command: {f'`{command}`' if command else NOT_RECORDED} (its last training "
             "command, command.json; the run's config.json, below, records every setting).",
             "Main settings: " + _settings(settings, TRAINING_SETTINGS) + "."]
    if metrics:
        lines.append(f"Steps: {_number(metrics.get('step'))} trained of "
                     f"{_number(metrics.get('planned_steps'))} planned (metrics.json).")
    else:
        lines.append(f"Steps: {_no_metrics(facts)}.")
    if time:
        lines.append(f"Time: the {time['steps']:,} logged steps took about "
                     f"{_duration(time['seconds'])} (training_log.log's tokens/s: the first "
                     "step's compilation counted, evaluations and saves not).")
    else:
        lines.append(f"Time: {NOT_RECORDED}.")
    lines.append("")
    config = {k: v for k, v in settings.items() if k != "model"}
    return lines + _json_block("The run's config.json (the model config above)", config)


def _results_section(facts):
    metrics = facts.records.get("metrics")
    rows = _split_figures(metrics, facts.source.get("step"))
    lines = ["## Results", ""]
    if not rows:
        return lines + [f"Valid and test figures: {_no_metrics(facts)}."]
    lines += ["Training's own evaluation of each checkpoint (metrics.json): perplexity per "
              "token of the build's tokenizer; word perplexity and bits per byte divide the "
              "same total by the split's words and bytes (meta.json).", ""]
    limit = facts.run_config.get("eval_max_records")
    if limit:
        lines += [f"Only the first {limit:,} records of each split were evaluated "
                  "(eval_max_records).", ""]
    lines += ["| checkpoint | split | tokens | perplexity | word perplexity | bits per byte |",
              "|---|---|---:|---:|---:|---:|"]
    for name, _, split, figures in rows:
        lines.append(f"| {name} | {split} | {_number(figures.get('tokens'))} | "
                     f"{_number(figures.get('perplexity'), 3)} | "
                     f"{_number(figures.get('word_perplexity'), 3)} | "
                     f"{_number(figures.get('bits_per_byte'), 4)} |")
    return lines


def _use_section(facts):
    if facts.export_format == "keras":
        lines = ["python3 generate.py --model=FILE.keras --prompt=\"...\" --seed=1",
                 "python3 evaluate.py --model=FILE.keras --split=test",
                 "python3 -c 'import par; print(par.load(\"FILE.keras\").card)'"]
    else:
        lines = ["import tensorflow as tf  # and tensorflow_text for a sentencepiece tokenizer",
                 "generate = tf.saved_model.load(\"DIRECTORY\").signatures[\"generate\"]"]
    return ["## Use", "", "```", *lines, "```"]


def render_card(facts):
    """The Markdown model card of `facts` (a `CardFacts`), ending in a newline."""
    title = facts.source.get("run") or NOT_RECORDED
    lines = [f"# Model card: `{title}`", "",
             "Generated by export.py from the run's files (meta.json, config.json, "
             f"metrics.json, training_log.log); a fact whose file was missing says "
             f"\"{NOT_RECORDED}\".", ""]
    lines += _summary_section(facts) + [""] + _use_section(facts) + [""]
    lines += _data_section(facts.meta) + [""] + _model_section(facts) + [""]
    lines += _training_section(facts) + [""] + _results_section(facts) + [""]
    lines += ["## Intended use and limitations", "", INTENDED_USE]
    return "\n".join(lines) + "\n"
