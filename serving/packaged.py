"""A trained model packaged with its tokenizer: one self-contained `.keras` file.

`export.py --format=keras` writes a `PackagedLM`, a `keras.Model` holding

- `lm`: the language model of any family (model/interface.py), float32 when
  loaded; its weights may be stored in float16 or bfloat16 (`storage_dtype`,
  `export_keras(..., dtype=...)`) to halve the file;
- `tokenizer_assets`: a `TokenizerAssets` layer whose `save_assets` /
  `load_assets` (the Keras 3 asset hooks, as KerasHub saves a tokenizer's
  vocabulary) write and read the tokenizer files inside the `.keras` zip
  (`assets/...`): the sentencepiece model, the word list or the byte order,
  with the frequency ranking the model's ids follow (pardata/tokenizers.py).
  The build's meta.json (tokenizer settings, vocabulary, split statistics,
  batch sizes) is in the layer's config;
- `run_config`: the run's TrainConfig as JSON, its paths reduced to base
  names (the recipe, and seq_len / eval_mem_len, the generation and
  evaluation defaults), and `source`: run name, checkpoint and step;
- `card`: the model card (Markdown, serving/card.py) export.py wrote, and
  `records`: the run directory's facts it was made from that the package holds
  nowhere else (metrics.json, the training time), both in the config. A
  package written before cards has neither: its `card` is built on demand
  from what it holds, its figures reading "not recorded".

So a `.keras` file alone generates and evaluates text (`generate.py
--model=`, `evaluate.py --model=`): no run directory, no built data. In
Python, `import par` (par.py at the repository root: it registers the
classes, package "par") and `keras.saving.load_model(path)` give a
`PackagedLM` whose `generate(prompts, max_length=...)` and `score(texts)`
return what generate.py and evaluate.py give (serving/texts.py);
`load_package(path)` gives a `serving.generation.Run`.

A `.keras` file written before this format (a bare `TransformerXLLM` or
`ShaRnnLM`) still loads with `keras.saving.load_model`, but has no
tokenizer: `load_package` refuses it with the command that re-exports it.
"""

import dataclasses
import json
import os
import zipfile
import zlib

import keras

from model.families import FAMILIES, build_model, family_of, register_keras_objects
from model.interface import check_model
from pardata import tokenizers
from pardata.errors import DataError
from runstore import progress
from runstore.config import RunConfig
from serving import card as model_card
from serving.errors import GenerationError
from serving.runs import Run, override_model
from serving.texts import generate_texts, score_texts, stream_text

# The families' layers must be registered before a package is deserialized.
register_keras_objects()

PACKAGE_CLASS = "par>PackagedLM"
STORAGE_DTYPES = ("float32", "float16", "bfloat16")


@keras.saving.register_keras_serializable(package="par")
class TokenizerAssets(keras.layers.Layer):
    """A tokenizer saved inside a `.keras` file (assets) with its build's meta.json (config).

    Holds no weights and is never called: Keras saves its files with
    `save_assets(dir_path)` and reads them back with `load_assets(dir_path)`
    after `from_config`, so `tokenizer` is set once the file is loaded.

    Args:
        meta: the build's meta.json (dict): meta["tokenizer"] names the
            files and settings, meta["vocab_size"] the ids.
        tokenizer: the `pardata.tokenizers.Tokenizer` (None until the assets
            are loaded).
        **kwargs: base Layer arguments (name).
    """

    def __init__(self, meta, tokenizer=None, **kwargs):
        kwargs.pop("trainable", None)
        super().__init__(trainable=False, **kwargs)
        # Kept as JSON text: Keras would wrap a dict attribute in a tracking structure.
        self._meta_json = json.dumps(meta, sort_keys=True)
        self.tokenizer = tokenizer
        self.built = True

    @property
    def meta(self):
        """dict: the build's meta.json."""
        return json.loads(self._meta_json)

    def get_config(self):
        config = super().get_config()
        config.pop("trainable", None)
        config["meta"] = self.meta
        return config

    def save_assets(self, dir_path):
        if self.tokenizer is None:
            raise ValueError("TokenizerAssets has no tokenizer to save")
        info = self.tokenizer.save(dir_path)
        if info["files"] != self.meta["tokenizer"]["files"]:
            raise ValueError(f"the tokenizer wrote {info['files']}, meta.json lists "
                             f"{self.meta['tokenizer']['files']}")

    def load_assets(self, dir_path):
        meta = self.meta
        tok = tokenizers.load_tokenizer_files(dir_path, meta["tokenizer"])
        if tok.vocab_size != meta["vocab_size"]:
            raise DataError(f"the packaged tokenizer has {tok.vocab_size} ids, its meta.json "
                            f"says {meta['vocab_size']}")
        self.tokenizer = tok


class _RunCache:
    """Holds a package's `Run` out of Keras's attribute tracking."""

    run = None


def _deserialize(value):
    return keras.saving.deserialize_keras_object(value) if isinstance(value, dict) else value


@keras.saving.register_keras_serializable(package="par")
class PackagedLM(keras.Model):
    """A language model with its tokenizer and run settings (see the module docstring).

    Calling it calls `lm` (model/interface.py: `(ids, state) -> (hidden,
    new_state)`); everything else goes through `lm` and `tokenizer`.

    Args:
        lm: a built language model (or its serialized config).
        tokenizer_assets: a `TokenizerAssets` (or its serialized config).
        run_config: the run's TrainConfig as a dict (paths as base names).
        source: dict with "run" (run directory name), "checkpoint" and "step".
        storage_dtype: dtype of the stored weights, one of STORAGE_DTYPES;
            the loaded model computes in float32 whatever it is.
        **kwargs: base Model arguments (name).
    """

    def __init__(self, lm, tokenizer_assets, run_config, source=None,
                 storage_dtype="float32", card=None, records=None, **kwargs):
        kwargs.pop("trainable", None)
        super().__init__(**kwargs)
        if storage_dtype not in STORAGE_DTYPES:
            raise ValueError(f"storage_dtype={storage_dtype!r} must be one of {STORAGE_DTYPES}")
        self.lm = _deserialize(lm)
        self.tokenizer_assets = _deserialize(tokenizer_assets)
        self._run_config_json = json.dumps(run_config, sort_keys=True)
        self._source_json = json.dumps(source or {}, sort_keys=True)
        self.storage_dtype = storage_dtype
        self._card = card
        self._records_json = None if records is None else json.dumps(records, sort_keys=True)
        self._cache = _RunCache()
        self.built = True

    @property
    def tokenizer(self):
        return self.tokenizer_assets.tokenizer

    @property
    def meta(self):
        return self.tokenizer_assets.meta

    @property
    def run_config(self):
        return json.loads(self._run_config_json)

    @property
    def source(self):
        return json.loads(self._source_json)

    @property
    def records(self):
        """dict or None: the run directory's facts the card reads (`serving.card.read_records`:
        metrics.json, the training time); None for a package written before cards."""
        return None if self._records_json is None else json.loads(self._records_json)

    @property
    def card(self):
        """str: the package's model card (Markdown, serving/card.py), as export.py wrote it
        inside the file; for a package written before cards, one built from what it holds
        (its figures then read "not recorded")."""
        if self._card is None:
            self._card = model_card.render_card(self._card_facts())
        return self._card

    def _card_facts(self):
        return model_card.CardFacts(
            meta=self.meta, run_config=self.run_config, family=self.lm.family,
            parameters=model_card.parameter_counts(self.lm), source=self.source,
            storage_dtype=self.storage_dtype, records=self.records or {}, export_format="keras")

    def call(self, inputs, state=None, training=False, mem_len=None):
        return self.lm(inputs, state, training=training, mem_len=mem_len)

    def generate(self, prompts, max_length=None, *, num_tokens=None, sampler=None,
                 temperature=None, top_k=None, top_p=None, seed=None, allow_unk=False,
                 sampler_args=None, stop=None, repetition_penalty=1.0, batch_size=32):
        """Continues each prompt as generate.py does for the same seed and options.

        `generate("The game", max_length=40, sampler="top_p", top_p=0.9, seed=1)`:
        a str for a str, a list for a list of prompts (prompt i drawn with seed + i,
        the list decoded in batches of `batch_size`), each the prompt followed by
        its continuation. `max_length` counts the prompt's tokens (KerasHub's
        meaning), `num_tokens` only the new ones (default 100); `sampler` is
        "greedy", "temperature", "top_k", "top_p" or None (temperature, top_k and
        top_p combined as given), or any registered sampler's name
        (samplers/registry.py) with its parameters in `sampler_args` (a dict), or
        a `samplers.base.Sampler` instance. `stop` (a str or a list) ends each
        continuation before the first stop string it holds ("\\n": the line's
        end); `repetition_penalty` > 1 makes tokens already in the prompt or the
        continuation less likely. The unknown-word token is never generated
        unless `allow_unk`. See `serving.texts.generate_texts`.
        """
        return generate_texts(self._serving_run(), prompts, max_length, num_tokens=num_tokens,
                              sampler=sampler, temperature=temperature, top_k=top_k,
                              top_p=top_p, seed=seed, allow_unk=allow_unk,
                              sampler_args=sampler_args, stop=stop,
                              repetition_penalty=repetition_penalty, batch_size=batch_size)

    def stream(self, prompt, max_length=None, **options):
        """Yields the continuation `generate(prompt, max_length, **options)` returns (one
        prompt, without it) piece by piece as it is decoded: `for piece in
        lm.stream("The game", seed=1): print(piece, end="", flush=True)`. The same
        options as `generate` but `batch_size`; see `serving.texts.stream_text`."""
        return stream_text(self._serving_run(), prompt, max_length, **options)

    def score(self, texts, *, batch_size=None, seq_len=None, mem_len=None):
        """Perplexity of each text as evaluate.py --text_file gives it: a dict
        (`perplexity`, `nll` per token, `tokens`, `word_perplexity`,
        `bits_per_byte`, ...) for a str, a list of them for a list. See
        `serving.texts.score_texts`."""
        return score_texts(self._serving_run(), texts, batch_size=batch_size, seq_len=seq_len,
                           mem_len=mem_len)

    def _serving_run(self):
        """The package as a `Run` (made once; its compiled decoders are reused)."""
        if self._cache.run is None:
            if self.tokenizer is None:
                raise PackageError("this PackagedLM has no tokenizer (its assets were not "
                                   "loaded): load the file with keras.saving.load_model")
            self._cache.run = run_from_package(self, self.name)
        return self._cache.run

    def get_config(self):
        lm = keras.saving.serialize_keras_object(self.lm)
        # The stored weights may be float16/bfloat16; the loaded model is float32.
        lm["config"]["dtype"] = keras.saving.serialize_keras_object(keras.DTypePolicy("float32"))
        return {"name": self.name, "lm": lm,
                "tokenizer_assets": keras.saving.serialize_keras_object(self.tokenizer_assets),
                "run_config": self.run_config, "source": self.source,
                "storage_dtype": self.storage_dtype, "card": self.card, "records": self.records}

    @classmethod
    def from_config(cls, config):
        return cls(**config)


class PackageError(GenerationError):
    """A file that is not a usable package (the message names it and the fix)."""


def package_run(run, dtype="float32"):
    """The `PackagedLM` of a loaded run (`serving.generation.Run`).

    Args:
        run: a Run (from `load_run`, or `load_package`).
        dtype: storage dtype of the weights (STORAGE_DTYPES); the weights are
            rounded to it (the loaded model computes in float32).

    Returns:
        A `PackagedLM`, ready for `.save(path)`.
    """
    if dtype not in STORAGE_DTYPES:
        raise ValueError(f"dtype={dtype!r} must be one of {', '.join(STORAGE_DTYPES)}")
    lm = run.model
    if dtype != "float32" or lm.dtype_policy.name != "float32":
        import tensorflow as tf

        stored = build_model(run.config.model, dtype=dtype)
        if len(stored.variables) != len(lm.variables):
            raise ValueError("the model rebuilt for storage has other variables")
        for target, value in zip(stored.variables, lm.variables):
            target.assign(tf.cast(value, target.dtype))
        lm = stored
    if run.meta is None:
        raise ValueError("the run has no meta.json (Run.meta) to package")
    facts = model_card.run_facts(run, "keras", storage_dtype=dtype)
    return PackagedLM(lm, TokenizerAssets(run.meta, run.tokenizer, name="tokenizer"),
                      facts.run_config, source=facts.source, storage_dtype=dtype,
                      card=model_card.render_card(facts), records=facts.records,
                      name="packaged_lm")


# ------------------------------------------------------------------- loading


def _registered_name(path):
    """The registered class name in a `.keras` file's config.json (PackageError if none)."""
    if not os.path.exists(path):
        note = progress.missing_package_note(path)  # the runs it would be exported from
        if note:
            raise PackageError(f"--model={path} does not exist: {note}")
        raise PackageError(f"--model={path} does not exist: give a .keras file written by "
                           "export.py (e.g. pretrained/wt2_base.keras)")
    if os.path.isdir(path):
        raise PackageError(f"--model={path} is a directory: give a .keras file written by "
                           "export.py (for a run directory use --model_dir)")
    try:
        with zipfile.ZipFile(path) as archive:
            names = set(archive.namelist())
            if "config.json" not in names or "metadata.json" not in names:
                raise ValueError("no config.json/metadata.json")
            config = json.loads(archive.read("config.json"))
    except (zipfile.BadZipFile, ValueError, OSError, UnicodeDecodeError, zlib.error) as error:
        with open(path, "rb") as f:  # a zip's first bytes: a .keras file cut short or damaged
            damaged = not isinstance(error, ValueError) and f.read(4) == b"PK\x03\x04"
        if damaged:
            raise PackageError(f"--model={path} is a damaged .keras file (truncated or corrupted: "
                               f"{error}): copy it again, or export it again with export.py "
                               "--format=keras") from None
        raise PackageError(f"--model={path} is not a Keras .keras file: give a file written "
                           "by export.py --format=keras") from None
    if not isinstance(config, dict):
        raise PackageError(f"--model={path} is not a Keras .keras file: give a file written "
                           "by export.py --format=keras")
    return config.get("registered_name") or config.get("class_name") or "?"


def check_package_file(path):
    """Raises PackageError unless `path` is a `.keras` package with its tokenizer."""
    path = os.fspath(path)
    name = _registered_name(path)
    if any(name in family.keras_model_names for family in FAMILIES.values()):
        raise PackageError(
            f"--model={path} holds a model without its tokenizer (a .keras file written by an "
            "older export.py): export it again from its run directory, python3 export.py "
            f"--model_dir=<run> --output={path} --overwrite, or use generate.py/evaluate.py "
            "--model_dir=<run>")
    if name != PACKAGE_CLASS:
        raise PackageError(f"--model={path} is a Keras file but not a model of this project "
                           f"(it holds {name}): give a .keras file written by export.py")
    return path


def _model_config(lm):
    """The family config of a loaded model (from its Keras config)."""
    family = FAMILIES[lm.family]
    fields = {f.name for f in dataclasses.fields(family.config_class)}
    keras_config = lm.get_config()
    # A model keeps its config whole under "config" or its fields at the top level.
    nested = keras_config.get("config")
    values = {k: v for k, v in (nested if isinstance(nested, dict) else keras_config).items()
              if k in fields}
    return family.config_from_dict(values)


def _run_config(package, model_config):
    """RunConfig of a package: its stored run config with the loaded model's config.

    Only the fields a RunConfig reads are needed (`runstore.config.FIELDS`), so a
    package keeps loading as the trainer's config evolves.
    """
    values = dict(package.run_config)
    values["model"] = model_config
    values["model_family"] = family_of(model_config).name
    return RunConfig.from_dict(values)


def load_package(path, model_overrides=None):
    """Loads a `.keras` package as a `serving.generation.Run` (float32 model).

    Args:
        path: a `.keras` file written by `export.py --format=keras`.
        model_overrides: model config fields to change (evaluation's
            clamp_len, same_length), settings that leave the weights valid;
            names the package's family lacks raise a GenerationError.

    Returns:
        A Run whose `package` is the loaded `PackagedLM`, `checkpoint_path`
        the file, `model_dir` and `data_dir` empty, `meta` the build's meta.json.

    Raises:
        PackageError: a missing file, not a Keras file, a file of another
            project, or an older `.keras` without tokenizer assets.
    """
    return run_from_package(load_packaged_lm(path), os.fspath(path), model_overrides)


def load_packaged_lm(path):
    """The `PackagedLM` of a `.keras` package (`par.load`), checked as `load_package` checks
    it: a PackageError naming the file and the fix instead of Keras's error."""
    path = check_package_file(path)
    try:
        package = keras.saving.load_model(path, compile=False)
    except (ValueError, TypeError, KeyError, OSError, DataError) as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise PackageError(f"--model={path} cannot be loaded ({first}): export it again with "
                           "export.py") from None
    if not isinstance(package, PackagedLM) or package.tokenizer is None:
        raise PackageError(f"--model={path} has no tokenizer assets: export it again with "
                           "export.py")
    return package


def run_from_package(package, path, model_overrides=None):
    """The `Run` of a loaded `PackagedLM` (see `load_package`); `path` names it."""
    lm = check_model(package.lm)
    config = _run_config(package, _model_config(lm))
    if model_overrides:
        config = override_model(config, dict(model_overrides), path)
        lm = check_model(build_model(config.model, dtype="float32"))
        for target, value in zip(lm.variables, package.lm.variables):
            target.assign(value)
    if package.tokenizer.vocab_size != lm.vocab_size:
        raise PackageError(f"--model={path}: its tokenizer has {package.tokenizer.vocab_size} "
                           f"ids but its model {lm.vocab_size}: export it again with export.py")
    return Run(lm, package.tokenizer, config, path, "", "", meta=package.meta, package=package)

