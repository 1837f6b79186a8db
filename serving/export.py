"""Exports a trained run: a Keras `.keras` file and a TensorFlow SavedModel.

`.keras`: the model (any family) with its config and weights. Every layer is
registered serializable under the package "par", so it loads back with
`keras.saving.load_model(path)` once the family's layers are imported
(`import model.transformer_xl.model`, `import model.sha_rnn.model`; `import model`
alone is lazy and registers nothing yet). No training, serving or data code
is needed.

SavedModel: a `tf.Module` whose `serve` signature runs one segment with the
model's state (model/interface.py), for TF Serving or `tf.saved_model.load`
without any project code:

    serve(token_ids: int32 [B, T], state_0, ..., state_{k-1}: float32)
        -> {"log_probs": float32 [B, T, V], "new_state_0", ..., "new_state_{k-1}"}

The k state inputs are the model's `state_signature()` in order (a
Transformer-XL: one memory [B, M, D] per attention-carrying block; SHA-RNN:
each LSTM's h [B, D] and c [B, D], then each attention memory [B, M, D]);
their specs are visible in the signature. `B`, `T` and `M` are free (M = 0 is
an empty memory); new memories keep min(M + T, mem_len) positions. Feeding
`new_state_i` back as `state_i` with the next segment continues the text, as
in Transformer-XL evaluation; the first call takes zeros of the right shapes
(memories with M = 0). The tokenizer (meta.json and its files) is copied
into `path/tokenizer/`, readable with `data_utils.load_tokenizer`.

Both exports are written to a temporary path next to the output and renamed
at the end, so a failed export (a full disk, an interruption) leaves nothing
behind; a failed write is an `ExportError` naming the output and the error.

Size glossary: B batch, T segment length, M memory length, D d_model,
V vocabulary size.
"""

import json
import os
import shutil

import tensorflow as tf

from serving.generation import META_FILE, GenerationError
from training import run_dir

SIGNATURE = "serve"
TOKENIZER_DIR = "tokenizer"


class ExportError(GenerationError):
    """A user-fixable export problem (bad output path, existing output)."""


def _check_output(path, overwrite):
    path = os.fspath(path)
    if not path:
        raise ExportError("the output path is empty: give a file or directory name")
    if os.path.exists(path) and not overwrite:
        raise ExportError(f"output {path} already exists: remove it, choose another output "
                          "or overwrite it (overwrite=True, export.py --overwrite)")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise ExportError(f"the directory {parent} of output {path} does not exist: "
                          "create it first")
    return path


def export_keras(run, path, overwrite=False):
    """Saves the run's model as a `.keras` file.

    Args:
        run: a `serving.generation.Run`.
        path: output file, ending in ".keras".
        overwrite: replace an existing file.

    Returns:
        The path written.

    Raises:
        ExportError: the name does not end in ".keras", the file exists, or
            its directory does not exist.
    """
    path = _check_output(path, overwrite)
    if not path.endswith(".keras"):
        raise ExportError(f"output {path} must end in .keras for a Keras export")
    tmp = _temporary_name(path) + ".keras"
    try:
        run.model.save(tmp, overwrite=True)
        os.replace(tmp, path)
    except (OSError, tf.errors.OpError) as error:
        raise _write_error(path, error) from None
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return path


def _write_error(path, error):
    return ExportError(f"cannot write {path}: {run_dir.reason(error)}; nothing was written "
                       "(the temporary files are removed): free some space and export again")


class ServingModule(tf.Module):
    """The SavedModel root: the model's variables and the `serve` function.

    Args:
        model: a built language model (model/interface.py).
        mem_len: int >= 0, memory positions kept in the new state.
    """

    def __init__(self, model, mem_len):
        super().__init__(name="language_model")
        self._model = model
        self._mem_len = int(mem_len)
        # Tracked explicitly: Keras 3 layers kept in Python lists are not
        # reached by TensorFlow's object graph (as in training.checkpoint).
        self.model_variables = [getattr(v, "value", v) for v in model.variables]
        self.mem_len = tf.Variable(self._mem_len, trainable=False, dtype=tf.int32, name="mem_len")
        state = [tf.TensorSpec(spec.shape, tf.float32, name=f"state_{i}")
                 for i, spec in enumerate(model.state_signature())]
        self.serve = tf.function(self._serve, input_signature=[
            tf.TensorSpec([None, None], tf.int32, name="token_ids"), *state])  # [B, T]

    def _serve(self, token_ids, *state):
        model = self._model
        state = [tf.cast(s, model.compute_dtype) for s in state]
        hidden, new_state = model(token_ids, state, training=False, mem_len=self._mem_len)
        outputs = {"log_probs": model.log_probs(hidden)}  # [B, T, V]
        for i, s in enumerate(new_state):
            outputs[f"new_state_{i}"] = tf.cast(s, tf.float32)
        return outputs


def export_saved_model(run, path, mem_len=None, overwrite=False):
    """Writes a TensorFlow SavedModel with the `serve` signature.

    Args:
        run: a `serving.generation.Run`.
        path: output directory (must not exist unless `overwrite`).
        mem_len: memory kept in the new state; None: `run.default_mem_len`.
        overwrite: replace an existing directory.

    Returns:
        The path written.

    Raises:
        ExportError: the output exists, its parent does not, or mem_len < 0.
    """
    path = _check_output(path, overwrite)
    mem_len = run.default_mem_len if mem_len is None else int(mem_len)
    if mem_len < 0:
        raise ExportError(f"mem_len={mem_len} must be >= 0")
    tmp = _temporary_name(path)
    try:
        module = ServingModule(run.model, mem_len)
        tf.saved_model.save(module, tmp,
                            signatures={SIGNATURE: module.serve.get_concrete_function()})
        _copy_tokenizer(run.data_dir, os.path.join(tmp, TOKENIZER_DIR))
        if os.path.exists(path):
            shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
        os.replace(tmp, path)
    except (OSError, tf.errors.OpError) as error:
        raise _write_error(path, error) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return path


def _temporary_name(path):
    """A fresh hidden name next to `path` (same file system, so renaming is atomic)."""
    return run_dir.temporary_name(path)


def _copy_tokenizer(data_dir, target):
    """Copies meta.json and the tokenizer files of a built data directory."""
    with open(os.path.join(data_dir, META_FILE), encoding="utf-8") as f:
        meta = json.load(f)
    os.makedirs(target)
    for name in [META_FILE, *meta["tokenizer"].get("files", [])]:
        shutil.copy2(os.path.join(data_dir, name), os.path.join(target, name))
