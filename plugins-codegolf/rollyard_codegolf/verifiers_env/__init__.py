"""The code-golf problems as a verifiers (>= 0.4) taskset, scored in the code-golf sandbox.

Taskset id ``rollyard_codegolf.verifiers_env``; run it in rollyard with
``rollyard train --rollout-plugin verifiers --verifiers-env rollyard_codegolf.verifiers_env``
(rollyard-verifiers makes the dotted id loadable), or from verifiers' own tools with the same
id once the package is importable. Importing this module imports verifiers, so the codegolf
entry point never imports it.

Taskset config: ``split`` (``train`` | ``eval``, the code-golf plugin's stable split) and
``options``, the code-golf plugin's options without their ``--codegolf-`` prefix (``tasks``,
``extract``, ``correct``, ``workers``, ``timeout``, ``unsafe_no_sandbox`` …). Rewards:
``correct`` (weight 1: share of the hidden tests passed, or all-or-nothing with
``correct = "all"``) and ``concise`` (weight 0.5: ``min(1, reference / length)`` for a program
that passes every hidden test, else 0).
"""

from rollyard_codegolf.verifiers_env.taskset import CodegolfTaskset

__all__ = ["CodegolfTaskset"]
