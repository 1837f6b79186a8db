r"""Trains a language model of any family: a PAR Transformer-XL supernet, a fixed
architecture, or SHA-RNN / LSTM (`--model_family`).

Flags become one frozen, validated `TrainConfig` (training/setup/config.py), which
is written to `model_dir/config.json` and handed to `training.run.loop.train`.
Running again with the same flags resumes from the last checkpoint; Ctrl-C or
SIGTERM writes one at the current step first (docs/faults.md).

Usage:
    python3 train.py --data_dir=data/wikitext2 --model_dir=runs/search
    python3 train.py --data_dir=data/wikitext2 --model_dir=runs/derived \
        --architecture=runs/search          # train the derived architecture
    python3 train.py --flagfile=my_run.flags

Model flags are generated from the fields of every family's config
(model/families.py; their help text lives next to the field) and default to
the values of `--preset` (default: the family's own); a flag of another
family is refused. `vocab_size` always comes from the data, and so do
`--seq_len` and `--batch_size` unless given (then they must match the data).
"""

import dataclasses
import os
import sys

import tools.in_environment  # noqa: F401  (one line, not a traceback, outside the environment)

from absl import app, flags, logging

from model.config_base import cutoffs_problem
import pardata.quiet  # noqa: F401  (TensorFlow start-up noise; before TF is imported)
from training.setup import checks as config_checks
from training.setup import config as c
from training.setup.config import ConfigError, TrainConfig

_DEFAULTS = {f.name: f.default for f in TrainConfig.flag_fields()
             if f.default is not dataclasses.MISSING}
# Model flags that are parsed from strings by hand (shared by the families).
SPECIAL_MODEL_FLAGS = ("architecture", "cutoffs", "proj_dims")


def section_flag_fields():
    """The registered plug-ins' config sections: section name -> its fields that are flags
    (all but those marked "flag": False), read when the flags are defined."""
    return {name: [f for f in dataclasses.fields(section) if f.metadata.get("flag", True)]
            for name, section in TrainConfig.section_fields().items()}


def _flag_kind(field):
    """absl DEFINE_ kind of a config field, from its type."""
    kind = str(field.type) if not isinstance(field.type, type) else field.type.__name__
    if "choices" in field.metadata:
        return "enum"
    for name, flag_kind in (("bool", "boolean"), ("float", "float"), ("tuple", "list"),
                            ("int", "integer"), ("str", "string")):
        if kind.startswith(name) or kind.startswith(f"typing.{name}"):
            return flag_kind
    raise TypeError(f"config field {field.name} has a type ({kind}) with no flag kind")


def model_flag_fields():
    """Flag name -> (dataclass field, families having it), in family and field order.

    One flag per name: fields of the same name in several families share it
    (the type and choices of the first family that defines it; see
    `_model_flag_help` for the text).
    """
    from model.families import FAMILIES

    fields = {}
    for family in FAMILIES.values():
        for field in family.flag_fields():
            if field.name in SPECIAL_MODEL_FLAGS:
                continue
            if field.name not in fields:
                fields[field.name] = (field, [])
            fields[field.name][1].append(family.name)
    return fields


def _model_flag_help(name, owners):
    """The fields' help text; per family where the families describe it differently."""
    from model.families import FAMILIES

    helps = {}
    for family in owners:
        field = next(f for f in FAMILIES[family].flag_fields() if f.name == name)
        helps[family] = field.metadata["help"]
    if len(set(helps.values())) == 1:
        text = next(iter(helps.values()))
    else:
        text = " ".join(f"{family}: {help_}" for family, help_ in helps.items())
    if sorted(owners) != sorted(FAMILIES):
        text += f" ({', '.join(owners)} only.)"
    return text + " Default: the preset's."


# TrainConfig's flag groups in --help order (the [group] at the start of each help
# text); the plug-ins' sections' groups come after "model" (`flag_groups`).
GROUPS = ("data", "model", "optimisation", "schedule", "run length", "evaluation",
          "checkpoints", "logging", "distribution", "performance")


def flag_groups():
    """GROUPS with the groups of the registered plug-ins' flags (in registry order) after
    "model", e.g. the PAR search's "search"."""
    extra = []
    for fields in section_flag_fields().values():
        for field in fields:
            group = field.metadata["group"]
            if group not in GROUPS and group not in extra:
                extra.append(group)
    at = GROUPS.index("model") + 1
    return GROUPS[:at] + tuple(extra) + GROUPS[at:]


def define_flags(fv=flags.FLAGS):
    """Defines every train.py flag on `fv` (tests use their own FlagValues).

    The flags are generated from fields: TrainConfig's (training/setup/config.py),
    its plug-in sections' (e.g. SearchConfig, training/plugins/par_search/
    config.py) and every model family's config (model/families.py), each
    with its help text, group and choices in the field's metadata. Besides them, only the
    flags that are parsed into model fields by hand (--architecture,
    --cutoffs and its cost model, --proj_dims) and --overwrite are defined
    here. `--help` lists flags alphabetically; the [group] at the start of
    each help text says where it belongs.
    """

    def define(kind, name, default, group, help_, *args):
        getattr(flags, f"DEFINE_{kind}")(name, default, *args, f"[{group}] {help_}",
                                         flag_values=fv)

    def define_field(field, group, help_, default):
        kind = _flag_kind(field)
        args = [list(field.metadata["choices"])] if kind == "enum" else []
        define(kind, field.name, default, group, help_, *args)

    fields = TrainConfig.flag_fields() + [f for section in section_flag_fields().values()
                                          for f in section]
    groups = flag_groups()
    unknown = sorted({f.metadata["group"] for f in fields} - set(groups))
    if unknown:
        raise ValueError(f"TrainConfig fields in groups {unknown} that GROUPS does not list")
    for group in groups:
        for field in fields:
            if field.metadata["group"] == group:
                default = field.metadata.get("flag_default", field.default)
                define_field(field, group, field.metadata["help"], default)
        if group == "model":
            _define_model_flags(define, define_field)
        if group == "checkpoints":
            define("boolean", "overwrite", False, group, "Discard a previous run in --model_dir.")
            define("string", "export", "", group,
                   "After training, export the final network's best checkpoint (the retrained "
                   "one after --then_retrain) to this self-contained .keras file.")
    return fv


def _define_model_flags(define, define_field):
    """The model families' fields (default: the preset's) and the hand-parsed model flags."""
    group = "model"
    define("string", "architecture", None, group, "supernet, transformer_xl, an a/f/i string "
           "of one letter per block such as afafff, or a finished search run (or its "
           "architecture.json/.txt) whose derived architecture to train from scratch. The "
           "string does not set the depth: it must have --num_blocks letters (default: the "
           "preset's num_blocks).")
    define("string", "cutoffs", None, group, "Adaptive-softmax cutoffs: a comma list such as "
           "1000,4000, 'none' (full softmax) or 'auto' (optimal_cuts.py on the training "
           "unigram counts, --num_tails tails).")
    define("integer", "num_tails", 2, group, "Tail clusters for --cutoffs=auto.")
    define("float", "cutoff_logit_cost", 60.0, group, "--cutoffs=auto cost model: multiply-add "
           "equivalents per computed logit (0 = the pure multiply-add model of the adaptive "
           "softmax paper; ~60 fits a CPU, see bench/bench_adaptive_softmax.py).")
    define("integer", "cutoff_min_head", 1000, group, "--cutoffs=auto: smallest head (frequent "
           "tokens kept at full width); lowered to leave room for the tails on small "
           "vocabularies.")
    define("list", "proj_dims", None, group, "Explicit tail widths, one per cutoff.")
    for name, (field, owners) in model_flag_fields().items():
        define_field(field, group, _model_flag_help(name, owners), None)


def recipe_values(fv):
    """The values --recipe gives to the flags not on the command line (name -> value).

    Raises:
        ConfigError: a flag given with another value than the recipe's settings.
    """
    from training.setup import recipes

    if not fv.recipe:
        return {}
    recipe = recipes.get_recipe(fv.recipe)
    applied = {}
    for name, value in recipe.values.items():
        if fv[name].present:
            problem = recipes.contradiction(recipe, name, fv[name].value)
            if problem:
                raise ConfigError(problem)
        else:
            applied[name] = value
    return applied


def _model_config(fv, meta, recipe=None):
    """(family, preset, model config) from --model_family, --preset, the model flags (and
    the model fields --recipe sets, `recipe_values`) and the data's vocab."""
    from model.families import get_family

    family = get_family(fv.model_family)
    preset = fv.preset or family.default_preset
    try:
        family.check_preset(preset)
    except ValueError as error:
        raise ConfigError(str(error)) from None
    own = {f.name for f in family.flag_fields()}
    for name, (_, owners) in model_flag_fields().items():
        if fv[name].value is not None and name not in own:
            raise ConfigError(
                f"--{name} is a flag of --model_family={'/'.join(owners)}, not of "
                f"--model_family={family.name}: drop it (or choose that family)")
    for name in SPECIAL_MODEL_FLAGS:
        if fv[name].value is not None and name not in own:
            raise ConfigError(f"--{name} does not apply to --model_family={family.name}: drop it")
    model_fields = set(model_flag_fields())
    for name in sorted(model_fields.intersection(recipe or {}) - own):
        raise ConfigError(f"--recipe={fv.recipe} sets --{name}, which --model_family="
                          f"{family.name} does not have: drop --recipe for this family")
    vocab = meta["vocab_size"]
    overrides = {"vocab_size": vocab}
    for name in own:
        if name not in SPECIAL_MODEL_FLAGS and fv[name].value is not None:
            value = fv[name].value
            overrides[name] = _int_list(name, value) if isinstance(value, list) else value
        elif name in (recipe or {}):
            overrides[name] = recipe[name]
    if fv.architecture is not None:
        num_blocks = overrides.get("num_blocks", family.presets[preset].get("num_blocks"))
        overrides["architecture"] = _architecture(fv.architecture, num_blocks, preset)
    if fv.proj_dims is not None:
        overrides["proj_dims"] = _int_list("proj_dims", fv.proj_dims)
    cutoffs = (fv.cutoffs or "").strip().lower()
    try:
        if cutoffs == "auto":
            provisional = family.preset_config(
                preset, **{**overrides, "cutoffs": (), "proj_dims": ()})
            overrides["cutoffs"] = _auto_cutoffs(fv, meta, provisional,
                                                 overrides.get("proj_dims", ()))
        elif cutoffs == "none":
            overrides["cutoffs"] = ()
        elif cutoffs:
            overrides["cutoffs"] = _int_list("cutoffs", cutoffs.split(","))
        chosen = overrides.get("cutoffs", tuple(family.presets[preset].get("cutoffs", ())))
        if cutoffs_problem(chosen, vocab):
            source = "--cutoffs" if cutoffs else f"--preset={preset}"
            raise ConfigError(
                f"--cutoffs={','.join(map(str, chosen))} (from {source}) do not fit the "
                f"data's vocab_size={vocab} (each must be in [1, {vocab})): use "
                "--cutoffs=auto or --cutoffs=none")
        return family, preset, family.preset_config(preset, **overrides)
    except ValueError as error:
        if isinstance(error, ConfigError):
            raise
        raise ConfigError(f"invalid model flags: {error}") from None


def _int_list(name, items):
    try:
        return tuple(int(x) for x in items)
    except ValueError:
        raise ConfigError(f"--{name}={','.join(items)} must be a comma list of integers"
                          + (", 'none' or 'auto'" if name == "cutoffs" else "")) from None


def _architecture(value, num_blocks, preset):
    """The a/f/i string of --architecture; it must have one letter per block."""
    from training.plugins.par_search import derive

    if value in ("supernet", "transformer_xl"):
        return value
    try:
        arch = derive.read_architecture(value)
    except (ValueError, FileNotFoundError) as error:
        raise ConfigError(f"--architecture={value}: {error}") from None
    if num_blocks is not None and len(arch) != num_blocks:
        source = "" if arch == value else f" ({arch})"
        raise ConfigError(
            f"--architecture={value}{source} has {len(arch)} blocks but the model has "
            f"--num_blocks={num_blocks} (the preset {preset}'s unless given): give "
            f"{num_blocks} letters, or pass --num_blocks={len(arch)} to change the depth")
    return arch


def _auto_cutoffs(fv, meta, model, proj_dims):
    import data_utils
    from optimal_cuts import optimal_cutoffs

    counts = data_utils.unigram_counts(fv.data_dir, meta)
    # The head must leave at least one id for each tail.
    min_head = max(1, min(fv.cutoff_min_head, len(counts) - fv.num_tails))
    result = optimal_cutoffs(counts, fv.num_tails, model.d_model,
                             proj_factor=model.proj_factor, proj_dims=proj_dims,
                             min_head=min_head, logit_cost=fv.cutoff_logit_cost)
    logging.info("--cutoffs=auto: %s (%d tails, head >= %d, logit cost %g; %.2fx cheaper "
                 "than a full softmax)", ",".join(map(str, result.cutoffs)), fv.num_tails,
                 min_head, fv.cutoff_logit_cost, result.speedup)
    return tuple(int(x) for x in result.cutoffs)


def config_from_flags(fv):
    """Turns parsed flags into a validated TrainConfig (reads only meta.json).

    Returns:
        (TrainConfig, overwrite).

    Raises:
        ConfigError / data_utils.DataError: with a message naming the flag.
    """
    import data_utils

    if not fv.data_dir:
        raise ConfigError("--data_dir is required: the directory build_data.py wrote")
    if not fv.model_dir:
        raise ConfigError("--model_dir is required: where checkpoints and logs go")
    if os.path.exists(fv.data_dir) and not os.path.isdir(fv.data_dir):
        raise ConfigError(f"--data_dir={fv.data_dir} is a file, not a data directory: give the "
                          "directory ./create_tfrecords.sh or build_data.py wrote, the one "
                          "holding meta.json (e.g. data/wikitext2)")
    meta = data_utils.load_meta(fv.data_dir)
    recipe = recipe_values(fv)
    family, preset, model = _model_config(fv, meta, recipe)
    values = {name: fv[name].value for name in _DEFAULTS if name in fv}
    sections = section_flag_fields()
    for section, fields in sections.items():
        values[section] = {f.name: fv[f.name].value for f in fields}
    # The preset's recommended training settings where no flag was given, then the
    # recipe's (`recipe` holds only flags not given; the user chose it over the preset).
    preset_values = {name: value for name, value in family.train_defaults.get(preset, {}).items()
                     if not fv[name].present}
    for name, value in {**preset_values, **recipe}.items():
        section = next((s for s, fields in sections.items()
                        if name in {f.name for f in fields}), None)
        if section or name in values:
            (values[section] if section else values)[name] = value
    values.update(
        data_dir=fv.data_dir, model_dir=fv.model_dir, model=model, model_family=family.name,
        preset=preset,
        seq_len=meta["seq_len"] if fv.seq_len is None else fv.seq_len,
        batch_size=meta["batch_size"] if fv.batch_size is None else fv.batch_size,
        eval_mem_len=model.mem_len if fv.eval_mem_len is None else fv.eval_mem_len,
        logdir=fv.logdir or "", recipe=fv.recipe or "")
    config = TrainConfig(**values)
    config_checks.check_data(config, meta)
    return config, fv.overwrite


def config_summary(config):
    """One short line describing the run (the whole config goes to config.json)."""
    model = config.model
    size = ", ".join(f"{k} {getattr(model, k)}" for k in (
        "architecture", "d_model", "num_blocks", "num_layers") if hasattr(model, k))
    length = f"{config.max_steps} steps" if config.max_steps else f"{config.epochs} epochs"
    return (f"{config.model_dir}: {config.model_family} preset {config.preset} ({size}), "
            f"batch {config.batch_size} x {config.seq_len}, {config.optimizer} lr "
            f"{config.learning_rate:g}, {length}, {config.precision}; full config in "
            f"{os.path.join(config.model_dir, c.CONFIG_FILE)}")


def main(argv):
    """Exit status: 0 done, 1 an error the user can fix (one `error: ...` line),
    130/143 interrupted by SIGINT/SIGTERM after writing a checkpoint (one
    `interrupted at step N: ...` line; docs/faults.md)."""
    import data_utils
    from runstore.run_dir import WriteError
    from training.report.summary import run_summary
    from training.run.loop import NonFiniteError, TrainingInterrupted, train

    if len(argv) > 1:
        print(f"error: unexpected arguments {argv[1:]}; all options are --flags",
              file=sys.stderr)
        return 1
    from serving.errors import GenerationError

    try:
        config, overwrite = config_from_flags(flags.FLAGS)
        export_path = _check_export(flags.FLAGS.export, overwrite)
        _check_logdir(config)
        logging.info("%s", config_summary(config))
        _log_plan(config, export_path)
        results = train(config, overwrite=overwrite)
        exported = _export(config, results, export_path, overwrite) if export_path else None
    except (TrainingInterrupted, ExportInterrupted) as stop:
        print(stop, file=sys.stderr)
        return stop.exit_code
    except (ConfigError, data_utils.DataError, NonFiniteError, WriteError,
            GenerationError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(run_summary(config, results))
    if "retrain" in results or exported:
        print(pipeline_summary(results, exported))
    return 0


def _log_plan(config, export_path):
    """The command's later stages (the plug-ins' `plan_lines`) and its export, up front."""
    import data_utils
    from training import plugins

    records = data_utils.load_meta(config.data_dir)["splits"]["train"]["records"]
    for line in plugins.plan_lines(config, records):
        logging.info("%s", line)
    if export_path:
        logging.info("at the end, the final network's best checkpoint is exported to %s",
                     export_path)


def _check_export(path, overwrite):
    """--export checked before any work: a .keras name in an existing directory."""
    if not path:
        return ""
    if not path.endswith(".keras"):
        raise ConfigError(f"--export={path} must end in .keras (a Keras package file)")
    from serving.export import ExportError, check_output

    try:
        return check_output(path, overwrite, name=f"--export={path}",
                            overwrite_fix="pass --overwrite")
    except ExportError as error:
        raise ConfigError(str(error)) from None


def _check_logdir(config):
    """A --logdir that cannot be written (read-only, no permission), found before training:
    TensorFlow's event writer would only fail at its first flush, steps later."""
    from runstore import run_dir
    from training.run.loop import default_logdir

    logdir = config.logdir or default_logdir(config.model_dir)
    problem = run_dir.unwritable(logdir)
    if problem:
        cause, fix = run_dir.reason_and_fix(problem, logdir)
        raise ConfigError(f"cannot write {os.path.abspath(logdir)} (--logdir): {cause}; {fix}; "
                          "nothing was written")


class ExportInterrupted(Exception):
    """SIGINT/SIGTERM during --export: the package's temporary file was removed."""

    def __init__(self, path, exit_code):
        self.exit_code = exit_code
        super().__init__(f"interrupted: nothing was written to {path}; the training is "
                         "complete: run the same command to export")


def _export(config, results, path, overwrite):
    """Exports the best checkpoint of the run that ended the command; returns the path."""
    from serving import export, runs
    from training.run import interrupt

    model_dir = results.get("retrain", {}).get("model_dir", config.model_dir)
    try:
        with interrupt.signals_as_interrupts():  # SIGTERM too removes the temporary file
            path = export.export_keras(runs.load_run(model_dir, checkpoint="best"), path,
                                       overwrite=overwrite)
    except KeyboardInterrupt as stop:
        raise ExportInterrupted(path, interrupt.interrupt_exit_code(stop)) from None
    logging.info("exported %s (best checkpoint) to %s", model_dir, path)
    return path


def pipeline_summary(results, exported):
    """The end of a search + retrain (+ export) command: both stages on a few lines."""
    lines = ["PAR pipeline:"]
    stages = [("search (supernet)", results)]
    if "retrain" in results:
        stages.append(("derived network", results["retrain"]))
    for name, run in stages:
        best = run.get("best") or run.get("last") or {}
        line = f"  {name} {run.get('architecture')}"
        if "valid" in best:
            line += (f": best valid perplexity {best['valid']['perplexity']:.2f} "
                     f"(step {best['step']})")
        if "test" in best:
            line += (f", test perplexity {best['test']['perplexity']:.2f}, word perplexity "
                     f"{best['test']['word_perplexity']:.2f}, bits/byte "
                     f"{best['test']['bits_per_byte']:.4f}")
        lines.append(line)
    decided = results.get("derivation", {}).get("decided_step")
    if decided is not None:
        lines.append(f"  the search was decided at step {decided}")
    if exported:
        lines.append(f"  exported: {exported}   (python3 generate.py --model={exported} "
                     "--prompt=...)")
    return "\n".join(lines)


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    define_flags()
    app.run(main)
