"""Inference on trained runs: text generation and model export.

- `serving.generation`: `load_run`, `Decoder`, `generate`, `generate_text`
  (Transformer-XL memory cache, temperature, top-k, top-p, seeds, greedy).
- `serving.export`: `export_keras` (a `.keras` file) and `export_saved_model`
  (a TensorFlow SavedModel with a `serve` signature).

Light on purpose, like `model/__init__.py`: importing `serving` does not load
TensorFlow; the submodules do.
"""
