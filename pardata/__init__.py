"""Data pipeline internals; the public API is re-exported by data_utils.py."""
