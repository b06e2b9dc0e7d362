"""Megatron policy training: the train group on Ray, the algorithm plugin's loss, HF <-> Megatron
conversion.

Importing this package loads torch; Ray and megatron-core load when a group starts::

    from rollyard.training import TrainConfig, TrainGroup

    group = TrainGroup(model_dir="model", config=TrainConfig(lr=1e-5, algorithm="grpo"),
                       tp=2, dp=1)
    metrics = group.train(samples)      # one optimizer step
    group.export_hf("weights/step-1")   # HF folder the engines load
    group.shutdown()
"""

from rollyard.training.config import TrainConfig
from rollyard.training.group import TrainGroup, check_layout

__all__ = ["TrainConfig", "TrainGroup", "check_layout"]
