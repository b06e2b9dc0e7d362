"""Isolated rollout environments: a plugin's rollout workers in a venv of their own, built with
uv from the plugin distribution's declared requirements plus the light core (docs/isolation.md).
Light: nothing here imports the training stack."""
