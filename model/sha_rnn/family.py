"""The SHA-RNN family's registry entry (the plain LSTM is its presets without attention
layers): registered when imported (model/families.py imports this module). Importing it
does not load TensorFlow."""

from model import sha_rnn
from model.registry import Family, register_family
from model.sha_rnn import presets
from model.sha_rnn.config import ShaRnnConfig

FAMILY = register_family(Family(
    name="sha_rnn",
    description="SHA-RNN (LSTM blocks, single-head attention over a long memory, "
                "Boom feed-forward; no attention layers: a plain LSTM LM)",
    config_class=ShaRnnConfig,
    presets=presets.PRESETS,
    default_preset="sha_rnn_small",
    builder=sha_rnn.build,
    register_keras_objects=sha_rnn.register_keras_objects,
    tiny_preset="sha_rnn_tiny",
    # The tiny presets keep the trainer's defaults (no TRAIN_DEFAULTS entry); a test run
    # takes the recipe's optimizer.
    tiny_train_values={"optimizer": "lamb_sharnn"},
    package=__package__,
    train_defaults=presets.TRAIN_DEFAULTS,
    summary_fields=("d_model", "num_layers"),
    keras_model_names=("par>ShaRnnLM",),
))
