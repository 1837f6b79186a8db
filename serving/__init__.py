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
