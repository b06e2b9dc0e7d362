"""Deprecated import path of :mod:`rollyard.evaluators`, kept so that plugins written against
it still import; new code imports ``rollyard.evaluators``."""

import warnings

from rollyard.evaluators import EvaluatedReward, Evaluator, ResultT, Score, evaluator_of

warnings.warn("rollyard.evaluation is now rollyard.evaluators", DeprecationWarning,
              stacklevel=2)

__all__ = ["EvaluatedReward", "Evaluator", "ResultT", "Score", "evaluator_of"]
