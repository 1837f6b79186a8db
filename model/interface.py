"""The language-model interface that training/ and serving/ code against.

Every model family (Transformer-XL / PAR in `model/transformer_xl/model.py`,
SHA-RNN in `model/sha_rnn/model.py`) is a `keras.Model` with these members and
nothing else is used by the trainer, the evaluator, generation or export:

    family: str                                  registry name ("transformer_xl", ...)
    vocab_size: int
    mem_len: int                                 default memory length (training)
    initial_state(batch_size, mem_len=None) -> list of zeros, each [B, ...]
    state_signature() -> list of tf.TensorSpec   same order; batch (and memory
                                                 length) dimensions None
    call(inputs, state=None, training=False, mem_len=None) -> (hidden, new_state)
        inputs int [B, T]; hidden [B, T, D]; new_state as initial_state, each
        row b of new_state continues row b of state; gradients are stopped
        between segments. mem_len None: the model's mem_len (0 keeps none).
    token_nll(hidden, targets) -> float32 [B, T]  (targets < 0 score 0)
    log_probs(hidden) -> float32 [B, T, V]
    extra_losses(hidden) -> list of scalar float32 training losses of this call
        (span losses, activation regularisation), each a mean over the rows
    variable_groups() -> dict name -> list of variables; "weights" always,
        any other group (e.g. "arch" of a supernet) is trained by a plug-in
        (training/plugins) with its own optimizer
    weight_decay_variables() -> the weights that take weight decay, chosen
        by role (matrices and embeddings; never biases, norm scales,
        relative biases, spans, gates or architecture logits)

Of those, `is_hidden_matrix_by_role` picks the hidden matrices (what Muon
orthogonalises): not the vocabulary-sized input and output layers.

State is a flat list of per-row tensors so that tf.distribute can split it by
rows (replica r owns rows [r*B/R, (r+1)*B/R)), checkpoints can store it, and a
SavedModel signature can take it as separate named inputs.

This module holds no TensorFlow import: `check_model` only inspects
attributes, so it is cheap to call on any object.
"""

import re

INTERFACE_METHODS = (
    "initial_state", "state_signature", "token_nll", "log_probs", "extra_losses",
    "variable_groups", "weight_decay_variables",
)
INTERFACE_ATTRIBUTES = ("family", "vocab_size", "mem_len")
WEIGHTS_GROUP = "weights"
# Weight decay by role: a variable is decayed when its name ends with one of
# these (Dense/LSTM kernels, projections, embedding tables).
DECAYED_SUFFIXES = ("kernel", "projection", "embeddings")
# The weights of the vocabulary-sized layers (model/layers/adaptive_softmax.py):
# embedding tables (`embeddings`, the adaptive input's `head_embeddings`,
# `tail_<i>_embeddings`) and the adaptive softmax's and adaptive input's head
# and tail weights (`head_kernel`, `tail_<i>_projection`, `tail_<i>_kernel`).
_VOCABULARY_WEIGHT = re.compile(r"embeddings$|^head_|^tail_\d+_")


def is_decayed_by_role(variable):
    """True for matrices whose role takes weight decay (see DECAYED_SUFFIXES).

    Biases, norm scales/offsets (gamma, beta), relative biases (content_bias,
    position_bias), spans, gates and architecture logits are not.
    """
    return variable.name.split("/")[-1].endswith(DECAYED_SUFFIXES)


def is_hidden_matrix_by_role(variable):
    """True for a decayed weight of rank >= 2 inside the network body.

    The hidden matrices are what Muon orthogonalises (K. Jordan et al. 2024,
    kellerjordan.github.io/posts/muon: Muon is for the hidden weight layers;
    the input embedding, the output layer, gains and biases take AdamW):
    attention query/key/value/position/output kernels (rank 3), feed-forward
    and LSTM kernels. Not the input embedding tables, nor any weight of the
    output adaptive softmax or of the adaptive input (its tail projections
    belong to the embedding), nor anything `is_decayed_by_role` leaves out
    (biases, norms, relative biases, spans, gates, architecture logits),
    whatever its rank. The trainer applies it to `weight_decay_variables()`.

    Args:
        variable: a model weight (anything with `name` and `shape`).
    """
    leaf = variable.name.split("/")[-1]
    return (len(variable.shape) >= 2 and is_decayed_by_role(variable)
            and not _VOCABULARY_WEIGHT.search(leaf))


def check_model(model):
    """Raises TypeError if `model` lacks a member of the interface.

    Args:
        model: the object to check (a built model of some family).

    Returns:
        The model, for chaining.
    """
    missing = [name for name in INTERFACE_METHODS if not callable(getattr(model, name, None))]
    missing += [name for name in INTERFACE_ATTRIBUTES if not hasattr(model, name)]
    if missing:
        raise TypeError(f"{type(model).__name__} does not implement the language-model "
                        f"interface (model/interface.py): missing {missing}")
    return model
