"""Test aid: just enough of ``vllm`` for SGLang to start on a CPU-only machine.

SGLang's non-CUDA rotary-embedding path imports ``vllm._custom_ops.rotary_embedding``; this
package provides that one function in pure torch. tests/sglang/run.sh puts it on SGLang's
PYTHONPATH. It is not part of rollyard.
"""
