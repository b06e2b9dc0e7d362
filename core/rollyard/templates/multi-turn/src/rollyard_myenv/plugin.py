"""rollyard-myenv's entry-point module: registers the environment.

rollyard imports this module to list plugins, so it stays light: anything heavy is imported
inside the methods that use it. The options are declared on the rollout (``MyenvOptions`` in
env.py): rollyard derives the ``--myenv-*`` flags and the ``[myenv]`` run.toml table from them.
"""

from rollyard import hookimpl

from rollyard_myenv.env import GuessNumber


@hookimpl
def register_rollouts(register):
    register(GuessNumber)
