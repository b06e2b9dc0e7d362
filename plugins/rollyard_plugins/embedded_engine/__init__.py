"""The embedded inference engine: a real SGLang-protocol server for CPUs, in this project.

It loads a Hugging Face checkpoint with transformers, keeps a key/value cache per running
sequence, batches concurrent requests continuously and returns the exact logprob of every
sampled token. ``python -m rollyard_plugins.embedded_engine --model DIR --port P`` or
``rollyard engine serve --model DIR --port P`` serves it; runs start it through the
``embedded`` engine plugin (:mod:`rollyard_plugins.embedded_engine.plugin`).
"""
