"""train.py's flags and the TrainConfig they make: flags <-> config in one place.

The flags are generated from fields: TrainConfig's (training/setup/config.py; with the
optimizers' options, e.g. --min_trust, declared in training/optimizers/), its
plug-in sections' (e.g. SearchConfig, training/plugins/par_search/config.py) and every
model family's config (model/families.py), each with its help text, group and choices
in the field's metadata. Besides them only the adaptive softmax's flags parsed by hand
(--cutoffs and its cost model, --proj_dims), the families' own hand-parsed flags
(`Family.model_flags`, e.g. Transformer-XL's --architecture) and --overwrite/--export
are defined here. A plug-in may read a model flag's value first
(`training.plugins.read_model_flag`: a search run's directory -> its derived
architecture). No family, no plug-in is named here.
"""

import dataclasses
import os

from absl import flags, logging

from model.config_base import cutoffs_problem, flag_kind
from pardata.meta import load_meta
from training import plugins
from training.setup import checks as config_checks
from training.setup import config as c
from training.setup.config import ConfigError, TrainConfig

# The adaptive softmax's model flags, parsed from strings by hand (shared by the families).
SOFTMAX_FLAGS = ("cutoffs", "proj_dims")


def hand_parsed_model_flags():
    """The model flags not generated from a config field: SOFTMAX_FLAGS and the families'
    `model_flags` (name -> the first family's `ModelFlag`), in family order."""
    from model.families import FAMILIES

    own = {}
    for family in FAMILIES.values():
        for flag in family.model_flags:
            own.setdefault(flag.name, flag)
    return SOFTMAX_FLAGS + tuple(own), own


def section_flag_fields():
    """The registered plug-ins' config sections: section name -> its fields that are flags
    (all but those marked "flag": False), read when the flags are defined."""
    return {name: [f for f in dataclasses.fields(section) if f.metadata.get("flag", True)]
            for name, section in TrainConfig.section_fields().items()}


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
            if field.name in hand_parsed_model_flags()[0]:
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

    The flags are generated from fields: TrainConfig's (training/setup/config.py,
    the optimizers' options included), its plug-in sections' (e.g. SearchConfig,
    training/plugins/par_search/config.py) and every model family's config
    (model/families.py), each
    with its help text, group and choices in the field's metadata. Besides them, only the
    flags that are parsed into model fields by hand (--architecture,
    --cutoffs and its cost model, --proj_dims) and --overwrite are defined
    here. `--help` lists flags alphabetically; the [group] at the start of
    each help text says where it belongs.
    """

    def define(kind, name, default, group, help_, *args):
        if name in fv and fv[name].help.endswith(f"[{group}] {help_}"):
            return  # defined by an earlier call (train.py's __main__ run again in a process)
        getattr(flags, f"DEFINE_{kind}")(name, default, *args, f"[{group}] {help_}",
                                         flag_values=fv)

    def define_field(field, group, help_, default):
        kind = flag_kind(field)
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
    for name, flag in hand_parsed_model_flags()[1].items():
        define("string", name, None, group, flag.help)
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
    the model fields --recipe sets, `recipe_values`) and the data's vocab; with
    --init_weights, the source model's config (`_source_model_config`)."""
    from model.families import get_family

    if fv.init_weights:
        return _source_model_config(fv, meta, recipe)
    family = get_family(fv.model_family)
    preset = fv.preset or family.default_preset
    try:
        family.check_preset(preset)
    except ValueError as error:
        raise ConfigError(str(error)) from None
    overrides = _model_overrides(fv, family, preset, meta, recipe)
    cutoffs = (fv.cutoffs or "").strip().lower()
    try:
        if cutoffs == "auto":
            provisional = family.preset_config(
                preset, **{**overrides, "cutoffs": (), "proj_dims": ()})
            overrides["cutoffs"] = _auto_cutoffs(fv, meta, family, provisional,
                                                 overrides.get("proj_dims", ()))
        chosen = overrides.get("cutoffs", tuple(family.presets[preset].get("cutoffs", ())))
        vocab = meta["vocab_size"]
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


def _model_overrides(fv, family, preset, meta, recipe):
    """The model fields the flags (and --recipe) give: name -> value, vocab_size the data's
    (--cutoffs=auto left to the caller). Raises ConfigError for another family's flag."""
    own = {f.name for f in family.flag_fields()}
    for name, (_, owners) in model_flag_fields().items():
        if fv[name].value is not None and name not in own:
            raise ConfigError(
                f"--{name} is a flag of --model_family={'/'.join(owners)}, not of "
                f"--model_family={family.name}: drop it (or choose that family)")
    hand_parsed, _ = hand_parsed_model_flags()
    for name in hand_parsed:
        if fv[name].value is not None and name not in own:
            raise ConfigError(f"--{name} does not apply to --model_family={family.name}: drop it")
    model_fields = set(model_flag_fields())
    for name in sorted(model_fields.intersection(recipe or {}) - own):
        raise ConfigError(f"--recipe={fv.recipe} sets --{name}, which --model_family="
                          f"{family.name} does not have: drop --recipe for this family")
    overrides = {"vocab_size": meta["vocab_size"]}
    for name in own:
        if name not in hand_parsed and fv[name].value is not None:
            value = fv[name].value
            overrides[name] = _int_list(name, value) if isinstance(value, list) else value
        elif name in (recipe or {}):
            overrides[name] = recipe[name]
    for flag in family.model_flags:
        if fv[flag.name].value is not None:
            overrides[flag.name] = _family_flag(flag, fv[flag.name].value,
                                                {**family.presets[preset], **overrides}, preset)
    if fv.proj_dims is not None:
        overrides["proj_dims"] = _int_list("proj_dims", fv.proj_dims)
    cutoffs = (fv.cutoffs or "").strip().lower()
    if cutoffs == "none":
        overrides["cutoffs"] = ()
    elif cutoffs and cutoffs != "auto":
        overrides["cutoffs"] = _int_list("cutoffs", cutoffs.split(","))
    return overrides


def _source_model_config(fv, meta, recipe):
    """(family, preset, model config) of --init_weights: the source model's config, which the
    model flags may only repeat (a fine-tune keeps the architecture and sizes of the weights
    it starts from), and data built with the source's tokenizer."""
    from model.families import get_family
    from serving.start_from import SourceError, build_tokenizer_sha256, read_source

    flag = f"--init_weights={fv.init_weights}"
    try:
        source = read_source(fv.init_weights)
    except SourceError as error:
        raise ConfigError(str(error)) from None
    family = get_family(source.model_family)
    config = family.config_from_dict(source.model)
    preset = source.settings.get("preset", "")
    preset = preset if preset in family.presets else family.default_preset
    for name, theirs in (("model_family", family.name), ("preset", preset)):
        if fv[name].present and fv[name].value != theirs:
            raise ConfigError(f"--{name}={fv[name].value} contradicts {flag}, whose model is "
                              f"--{name}={theirs}: drop --{name} (a fine-tune keeps its model)")
    if (fv.cutoffs or "").strip().lower() == "auto":
        raise ConfigError(f"--cutoffs=auto contradicts {flag}: a fine-tune keeps the source's "
                          "cutoffs; drop --cutoffs")
    overrides = _model_overrides(fv, family, preset, meta, recipe)
    vocab = overrides.pop("vocab_size")
    if vocab != config.vocab_size or build_tokenizer_sha256(fv.data_dir, meta) != \
            source.tokenizer_sha256():
        raise ConfigError(
            f"--data_dir={fv.data_dir} was not built with the tokenizer of {flag} (its "
            f"{vocab} ids are not the model's {config.vocab_size} in their order): build the "
            "text with the source's tokenizer (./finetune.sh --from=... --text=... does)")
    for name, value in sorted(overrides.items()):
        try:
            same = getattr(config.replace(**{name: value}), name) == getattr(config, name)
        except ValueError:
            same = False
        if not same:
            given = "from --recipe=" + fv.recipe if name in (recipe or {}) and \
                not fv[name].present else "given"
            raise ConfigError(
                f"--{name}={value} ({given}) contradicts {flag}, whose model has {name}="
                f"{getattr(config, name)!r}: drop --{name} (a fine-tune keeps the architecture "
                "and sizes of the weights it starts from)")
    return family, preset, config


def _int_list(name, items):
    try:
        return tuple(int(x) for x in items)
    except ValueError:
        raise ConfigError(f"--{name}={','.join(items)} must be a comma list of integers"
                          + (", 'none' or 'auto'" if name == "cutoffs" else "")) from None


def _family_flag(flag, value, fields, preset):
    """A family's hand-parsed flag (`ModelFlag`): the plug-ins' readers, then its parse."""
    try:
        read = plugins.read_model_flag(flag.name, value)
    except (ValueError, FileNotFoundError) as error:
        raise ConfigError(f"--{flag.name}={value}: {error}") from None
    try:
        return flag.parse(read, fields, preset)
    except ValueError as error:
        source = "" if read == value else f" ({read})"
        raise ConfigError(f"--{flag.name}={value}{source} {error}") from None


def _auto_cutoffs(fv, meta, family, model, proj_dims):
    from pardata.cutoffs import optimal_cutoffs
    from pardata.records import unigram_counts

    counts = unigram_counts(fv.data_dir, meta)
    # The head must leave at least one id for each tail.
    min_head = max(1, min(fv.cutoff_min_head, len(counts) - fv.num_tails))
    result = optimal_cutoffs(counts, fv.num_tails, family.softmax_width(model),
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
        ConfigError / pardata.errors.DataError: with a message naming the flag.
    """

    if not fv.data_dir:
        raise ConfigError("--data_dir is required: the directory build_data.py wrote")
    if not fv.model_dir:
        raise ConfigError("--model_dir is required: where checkpoints and logs go")
    if os.path.exists(fv.data_dir) and not os.path.isdir(fv.data_dir):
        raise ConfigError(f"--data_dir={fv.data_dir} is a file, not a data directory: give the "
                          "directory ./create_tfrecords.sh or build_data.py wrote, the one "
                          "holding meta.json (e.g. data/wikitext2)")
    meta = load_meta(fv.data_dir)
    recipe = recipe_values(fv)
    family, preset, model = _model_config(fv, meta, recipe)
    values = {f.name: fv[f.name].value for f in TrainConfig.flag_fields()
              if f.default is not dataclasses.MISSING and f.name in fv}
    sections = section_flag_fields()
    for section, fields in sections.items():
        values[section] = {f.name: fv[f.name].value for f in fields}
    # The preset's recommended training settings where no flag was given, then the
    # recipe's (`recipe` holds only flags not given; the user chose it over the preset).
    # Not for a fine-tune (--init_weights): its recipe is not the preset's training.
    preset_values = {name: value for name, value in family.train_defaults.get(preset, {}).items()
                     if not fv[name].present and not fv.init_weights}
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
    from model.families import get_family

    model = config.model
    size = ", ".join(f"{k} {getattr(model, k)}"
                     for k in get_family(config.model_family).summary_fields)
    length = f"{config.max_steps} steps" if config.max_steps else f"{config.epochs} epochs"
    return (f"{config.model_dir}: {config.model_family} preset {config.preset} ({size}), "
            f"batch {config.batch_size} x {config.seq_len}, {config.optimizer} lr "
            f"{config.learning_rate:g}, {length}, {config.precision}; full config in "
            f"{os.path.join(config.model_dir, c.CONFIG_FILE)}")
