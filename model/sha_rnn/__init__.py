"""SHA-RNN (Merity 2019, arXiv 1911.11423) and the plain LSTM language model.

    config.py     ShaRnnConfig (every field with its help)
    presets.py    named ShaRnnConfig fields and the recipe each implies
    attention.py  the single-head attention over a long memory
    block.py      one block: LSTM, optional attention, Boom feed-forward
    model.py      ShaRnnLM (the language-model interface)
    family.py     the family's registry entry (model/registry.py)

Importing this package does not load TensorFlow.
"""


def build(config, dtype=None):
    """Builds the SHA-RNN described by `config`, weights created (see `model.build_sha_rnn`)."""
    from model.sha_rnn.model import build_sha_rnn

    return build_sha_rnn(config, dtype=dtype)


def register_keras_objects():
    """Registers the family's Keras classes (importing its model module does), so that
    `keras.saving.load_model` can deserialize them."""
    import model.sha_rnn.model  # noqa: F401
