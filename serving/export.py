"""Exports a trained run: a Keras `.keras` file and a TensorFlow SavedModel.

`.keras`: the `TransformerXLLM` with its config and weights. Every layer is
registered serializable under the package "par", so it loads back with
`keras.saving.load_model(path)` once the layers are imported
(`import model.transformer_xl`, or `from model import TransformerXLLM`;
`import model` alone is lazy and registers nothing yet). No training,
serving or data code is needed.

SavedModel: a `tf.Module` whose `serve` signature runs one segment with
memory, for TF Serving or `tf.saved_model.load` without any project code:

    serve(token_ids: int32 [B, T], mems: float32 [num_mems, B, M, D])
        -> {"log_probs": float32 [B, T, V],
            "new_mems": float32 [num_mems, B, min(M + T, mem_len), D]}

`B`, `T` and `M` are free (M = 0 is an empty memory); `num_mems` and `D` are
fixed by the model and visible in the signature's input specs. Feeding
`new_mems` back as `mems` with the next segment continues the text, as in
Transformer-XL evaluation. The tokenizer (meta.json and its files) is copied
into `path/tokenizer/`, readable with `data_utils.load_tokenizer`.

Both exports are written to a temporary path next to the output and renamed
at the end, so a failed export leaves nothing behind.

Size glossary: B batch, T segment length, M memory length, D d_model,
V vocabulary size.
"""

import json
import os
import secrets
import shutil

import tensorflow as tf

from serving.generation import META_FILE, GenerationError

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
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return path


class ServingModule(tf.Module):
    """The SavedModel root: the model's variables and the `serve` function.

    Args:
        model: a built `TransformerXLLM`.
        mem_len: int >= 0, memory positions kept in `new_mems`.
    """

    def __init__(self, model, mem_len):
        super().__init__(name="transformer_xl_lm")
        self._model = model
        self._mem_len = int(mem_len)
        # Tracked explicitly: Keras 3 layers kept in Python lists are not
        # reached by TensorFlow's object graph (as in training.checkpoint).
        self.model_variables = [getattr(v, "value", v) for v in model.variables]
        self.mem_len = tf.Variable(self._mem_len, trainable=False, dtype=tf.int32, name="mem_len")
        num_mems, d_model = model.num_mems, model.d_model
        self.serve = tf.function(self._serve, input_signature=[
            tf.TensorSpec([None, None], tf.int32, name="token_ids"),  # [B, T]
            tf.TensorSpec([num_mems, None, None, d_model], tf.float32, name="mems"),  # [n, B, M, D]
        ])

    def _serve(self, token_ids, mems):
        model = self._model
        mem_list = tf.unstack(tf.cast(mems, model.compute_dtype), num=model.num_mems)
        hidden, new_mems = model(token_ids, mem_list, training=False, mem_len=self._mem_len)
        if new_mems:
            stacked = tf.stack(new_mems)  # [n, B, M', D]
        else:  # a model without attention blocks has no memory
            shape = tf.shape(token_ids)
            stacked = tf.zeros([0, shape[0], 0, model.d_model])
        return {"log_probs": model.log_probs(hidden),  # [B, T, V]
                "new_mems": tf.cast(stacked, tf.float32)}


def export_saved_model(run, path, mem_len=None, overwrite=False):
    """Writes a TensorFlow SavedModel with the `serve` signature.

    Args:
        run: a `serving.generation.Run`.
        path: output directory (must not exist unless `overwrite`).
        mem_len: memory kept in `new_mems`; None: `run.default_mem_len`.
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
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return path


def _temporary_name(path):
    """A fresh hidden name next to `path` (same file system, so renaming is atomic)."""
    parent, base = os.path.split(os.path.abspath(path))
    return os.path.join(parent, f".{base}.tmp-{os.getpid()}-{secrets.token_hex(4)}")


def _copy_tokenizer(data_dir, target):
    """Copies meta.json and the tokenizer files of a built data directory."""
    with open(os.path.join(data_dir, META_FILE), encoding="utf-8") as f:
        meta = json.load(f)
    os.makedirs(target)
    for name in [META_FILE, *meta["tokenizer"].get("files", [])]:
        shutil.copy2(os.path.join(data_dir, name), os.path.join(target, name))
