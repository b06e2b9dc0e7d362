"""The algorithms shipped with rollyard: ``grpo``, ``dr-grpo``, ``dapo``, ``gspo`` and ``rloo``.

Each is one module with its formula in the docstring; :mod:`.plugin` registers them through the
same ``register_algorithms`` hook a third-party algorithm uses.
"""
