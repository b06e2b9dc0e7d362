"""Tiny Hugging Face-format models built from a config, with a tokenizer trained in-process.

``rollyard init-model DIR`` writes one; nothing is downloaded. See :mod:`rollyard.models.tiny`.
"""
