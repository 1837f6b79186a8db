"""Inference on trained runs and exported models: text generation, evaluation, export.

- `serving.generation`: `load_run`, `load` (a run directory or a `.keras`
  package), `Decoder`, `generate`, `generate_text` (Transformer-XL memory
  cache, temperature, top-k, top-p, seeds, greedy).
- `serving.evaluation`: every transition of a split or a text file scored once.
- `serving.packaged`: the self-contained `.keras` package (model, tokenizer
  assets, run settings) and `load_package`.
- `serving.export`: `export_keras` (a `.keras` package) and
  `export_saved_model` (a TensorFlow SavedModel with generate, tokenize,
  detokenize and serve signatures; `serving.graph_tokenizer` holds the
  tokenizers as TensorFlow ops).

Light on purpose, like `model/__init__.py`: importing `serving` does not load
TensorFlow; the submodules do.
"""


def model_source_problem(model, model_dir, checkpoint_given):
    """What is wrong with a script's --model / --model_dir / --checkpoint flags (one line),
    or None: exactly one of a .keras file and a run directory, and a checkpoint only with
    a run directory."""
    if model and model_dir:
        return "give either --model (a .keras file) or --model_dir (a run directory), not both"
    if not model and not model_dir:
        return ("--model (a .keras file written by export.py, e.g. pretrained/wt2_base.keras) "
                "or --model_dir (a run trained with train.py) is required")
    if model and checkpoint_given:
        return ("--checkpoint selects a checkpoint of --model_dir; a --model file holds one "
                "model: drop --checkpoint")
    return None
