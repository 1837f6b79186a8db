"""A trained model to start from: a `.keras` package or a run directory.

Fine-tuning (`--init_weights`, finetune.sh) starts from a model someone trained:
its family and model config, its tokenizer with the id order its embedding and
softmax rows follow, and its weights. `read_source` reads everything but the
weights from the files alone, without TensorFlow (the flags are checked first):

- a package (`serving.packaged.PackagedLM`): the zip's config.json holds the run's
  config and the build's meta.json; the tokenizer files are its assets;
- a run directory: config.json, the data's meta.json and tokenizer (the run's
  `data/` copy, else its data_dir), the best checkpoint (the newest if it was
  never evaluated).

`load_source_model` then loads the model with its weights (TensorFlow), through
`serving.packaged.load_packaged_lm` or `serving.runs.load_run`.
"""

import dataclasses
import hashlib
import json
import os
import tempfile
import zipfile
import zlib

from pardata import tokenizers
from pardata.errors import DataError
from pardata.meta import META_FILE
from runstore.run_dir import (
    BEST_DIR,
    CONFIG_FILE,
    DATA_DIR,
    checkpoint_file_step,
    checkpoint_prefix,
)
from serving.errors import GenerationError

PACKAGE_CLASS = "par>PackagedLM"  # serving.packaged.PACKAGE_CLASS (that module loads Keras)
ASSETS = "assets/"


class SourceError(GenerationError):
    """A path that is not a model to start from (the message names the flag and the fix)."""


@dataclasses.dataclass(frozen=True)
class Source:
    """What fine-tuning reads of a trained model before loading its weights.

    Attributes:
        path: the package file or run directory, as given.
        kind: "package" or "run".
        model_family: the registered family's name.
        model: the family's model config as a dict (config.json's "model").
        settings: the run's whole config (package: its stored run config).
        meta: the meta.json of the build the model was trained on.
        origin: where the weights come from: {"run", "checkpoint", "step"}.
        tokenizer_files: file name -> bytes of the tokenizer (meta["tokenizer"]["files"]).
    """

    path: str
    kind: str
    model_family: str
    model: dict
    settings: dict
    meta: dict
    origin: dict
    tokenizer_files: dict = dataclasses.field(repr=False)

    def tokenizer(self):
        """The `pardata.tokenizers.Tokenizer` with the source's id order."""
        with tempfile.TemporaryDirectory() as directory:
            for name, content in self.tokenizer_files.items():
                with open(os.path.join(directory, name), "wb") as f:
                    f.write(content)
            return tokenizers.load_tokenizer_files(directory, self.meta["tokenizer"])

    def tokenizer_sha256(self):
        """sha256 (hex) of the tokenizer files: the tokenizer's identity (`files_sha256`)."""
        return files_sha256(self.tokenizer_files)

    def describe(self):
        """dict for a build's meta.json: the source's path, kind and origin."""
        return {"path": os.path.abspath(self.path), "kind": self.kind,
                "model_family": self.model_family, **self.origin}


def files_sha256(files):
    """sha256 (hex) of tokenizer files (name -> bytes), in name order."""
    digest = hashlib.sha256()
    for name in sorted(files):
        digest.update(name.encode() + b"\0" + files[name])
    return digest.hexdigest()


def build_tokenizer_sha256(data_dir, meta):
    """`files_sha256` of a build's tokenizer files (None if one is unreadable): equal to a
    source's `tokenizer_sha256` when the build has the source's tokenizer and id order."""
    files = {}
    for name in meta["tokenizer"].get("files", []):
        try:
            with open(os.path.join(data_dir, name), "rb") as f:
                files[name] = f.read()
        except OSError:
            return None
    return files_sha256(files)


def _not_a_source(path, flag, why):
    return SourceError(f"{flag}={path} {why}: give a .keras package written by export.py "
                       "(e.g. pretrained/wt2_base.keras) or a run directory written by train.py")


def read_source(path, flag="--init_weights"):
    """The `Source` at `path` (no TensorFlow).

    Args:
        path: a `.keras` package or a run directory.
        flag: how messages name the path (finetune.py's --from, train.py's --init_weights).

    Raises:
        SourceError: missing, neither a package nor a run, or unreadable (one line).
    """
    path = os.fspath(path)
    if not path or not os.path.exists(path):
        raise _not_a_source(path, flag, "does not exist")
    if os.path.isdir(path):
        return _read_run(path, flag)
    return _read_package(path, flag)


def _read_package(path, flag):
    """A `.keras` package's Source from its zip (config.json and the tokenizer assets)."""
    try:
        with zipfile.ZipFile(path) as archive:
            config = json.loads(archive.read("config.json"))
            names = archive.namelist()
            if config.get("registered_name") != PACKAGE_CLASS:
                raise _not_a_source(path, flag, "is a Keras file but not a package of this "
                                    f"project (it holds {config.get('registered_name')})")
            inner = config["config"]
            meta = inner["tokenizer_assets"]["config"]["meta"]
            files = {}
            for name in meta["tokenizer"]["files"]:
                member = next((n for n in names if n.startswith(ASSETS)
                               and n.rsplit("/", 1)[-1] == name), None)
                if member is None:
                    raise _not_a_source(path, flag, f"has no tokenizer file {name}")
                files[name] = archive.read(member)
    except (zipfile.BadZipFile, OSError, ValueError, KeyError, TypeError, zlib.error):
        raise _not_a_source(path, flag, "is not a .keras package") from None
    settings = dict(inner["run_config"])
    model = settings["model"]
    family = settings.get("model_family") or _family_of_model(inner["lm"])
    origin = {"run": inner.get("source", {}).get("run", ""),
              "checkpoint": inner.get("source", {}).get("checkpoint", ""),
              "step": inner.get("source", {}).get("step")}
    return Source(path, "package", family, model, settings, meta, origin, files)


def _family_of_model(lm_config):
    """The family of a package's model from its registered Keras name."""
    from model.families import FAMILIES

    name = lm_config.get("registered_name")
    for family in FAMILIES.values():
        if name in family.keras_model_names:
            return family.name
    raise KeyError(name)


def _read_run(path, flag):
    """A run directory's Source (config.json, the data's meta.json and tokenizer files)."""
    config_path = os.path.join(path, CONFIG_FILE)
    if not os.path.isfile(config_path):
        why = ("is a built data directory, not a run" if os.path.isfile(
            os.path.join(path, META_FILE)) else f"is a directory without {CONFIG_FILE}")
        raise _not_a_source(path, flag, why)
    try:
        with open(config_path, encoding="utf-8") as f:
            settings = json.load(f)
        model = settings["model"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise _not_a_source(path, flag, f"has an unreadable {CONFIG_FILE} ({error})") from None
    data_dir = next((d for d in (os.path.join(path, DATA_DIR), settings.get("data_dir", ""))
                     if d and os.path.isfile(os.path.join(d, META_FILE))), None)
    if data_dir is None:
        raise _not_a_source(path, flag, f"has no {DATA_DIR}/{META_FILE} and its data_dir "
                            "is gone (the tokenizer is needed)")
    try:
        with open(os.path.join(data_dir, META_FILE), encoding="utf-8") as f:
            meta = json.load(f)
        files = {}
        for name in meta["tokenizer"]["files"]:
            with open(os.path.join(data_dir, name), "rb") as f:
                files[name] = f.read()
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise _not_a_source(path, flag, f"has an unreadable tokenizer in {data_dir} "
                            f"({error})") from None
    checkpoint = _newest_checkpoint(path)
    if checkpoint is None:
        raise _not_a_source(path, flag, "holds no checkpoint (train it first)")
    origin = {"run": os.path.basename(os.path.normpath(path)), "checkpoint": checkpoint,
              "step": checkpoint_file_step(checkpoint + ".index")}
    family = settings.get("model_family", "")
    if not family:
        from model.families import DEFAULT_FAMILY
        family = DEFAULT_FAMILY
    return Source(path, "run", family, model, settings, meta, origin, files)


def _newest_checkpoint(path):
    """The best checkpoint of a run (relative to it), else its newest one, else None: read
    from the file names (no TensorFlow); `load_source_model` verifies it."""
    for directory in (BEST_DIR, ""):
        try:
            names = os.listdir(os.path.join(path, directory))
        except OSError:
            continue
        steps = [checkpoint_file_step(n) for n in names if n.endswith(".index")]
        steps = [s for s in steps if s is not None]
        if steps:
            return checkpoint_prefix(directory, max(steps))
    return None


def load_source_model(source):
    """The source's model with its weights (float32; loads TensorFlow).

    Raises:
        SourceError: the weights do not load (a damaged file), naming the source.
    """
    try:
        if source.kind == "package":
            from serving.packaged import load_packaged_lm

            return load_packaged_lm(source.path).lm
        from serving.runs import load_run

        return load_run(source.path, checkpoint=source.origin["checkpoint"]).model
    except (GenerationError, DataError) as error:
        raise SourceError(f"cannot load the weights of {source.path}: {error}") from None
