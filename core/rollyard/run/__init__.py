"""The RL run: engines, rollouts, training and the run folder."""
