"""A run's config.json as the run store reads it for whoever loads the model.

train.py writes the whole `TrainConfig` (training/setup/config.py) to
`model_dir/config.json`. Loading a trained model needs only part of it: the
model family and its config, where the data and the run were, the segment
length and the evaluation memory. `RunConfig` is that part, read without the
trainer's classes, so serving depends on the run store and not on training/;
`settings` keeps the whole file, for a package that stores the run's settings
(`serving.packaged`). The trainer keeps reading config.json with
`TrainConfig.load` (its validation and the migrations of older files).
"""

import dataclasses
import json
import os
from typing import Any

from model import families
from runstore.run_dir import CONFIG_FILE

# The fields of config.json a RunConfig reads (the rest stays in `settings`).
FIELDS = ("model_family", "model", "data_dir", "model_dir", "seq_len", "eval_mem_len")


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """What loading and serving a run's model need of its config.json.

    Attributes:
        model_family: name of the model family (model/families.py).
        model: the family's config (a dataclass of model/).
        data_dir: the built data the run was trained on.
        model_dir: the run directory it was trained in.
        seq_len: segment length T of the training data.
        eval_mem_len: memory length at evaluation (0: the model's mem_len).
        settings: the whole config.json (the trainer's other fields), as read.
    """

    model_family: str
    model: Any
    data_dir: str
    model_dir: str
    seq_len: int
    eval_mem_len: int
    settings: dict = dataclasses.field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, values):
        """A RunConfig from the dict of a config.json (the model nested under "model").

        Raises:
            KeyError: a field of FIELDS is missing.
            ValueError: the model family is unknown or its config invalid.
        """
        values = dict(values)
        family = families.get_family(values.get("model_family", families.DEFAULT_FAMILY))
        model = values["model"]
        if isinstance(model, dict):
            model = family.config_from_dict(model)
        return cls(model_family=family.name, model=model, data_dir=values["data_dir"],
                   model_dir=values["model_dir"], seq_len=int(values["seq_len"]),
                   eval_mem_len=int(values["eval_mem_len"]), settings=values)

    @classmethod
    def load(cls, model_dir):
        """Reads model_dir/config.json (OSError, ValueError, KeyError when unusable)."""
        with open(os.path.join(model_dir, CONFIG_FILE), encoding="utf-8") as f:
            return cls.from_dict(json.load(f))

    def replace(self, **changes):
        """A copy with some fields changed (the model config by `model=`)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self):
        """The config.json content: `settings` with this config's fields over it."""
        values = {**self.settings, **{name: getattr(self, name) for name in FIELDS}}
        values["model"] = self.model.to_dict()
        return values
