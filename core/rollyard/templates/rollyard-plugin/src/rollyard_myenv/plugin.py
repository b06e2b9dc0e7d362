"""rollyard-myenv's entry-point module: registers the environment, its reward and options.

rollyard imports this module to list plugins, so it stays light: anything heavy is imported
inside the methods that use it."""

from rollyard import hookimpl

from rollyard_myenv.env import DEFAULT_NUM_TASKS, DEFAULT_WORD_LENGTH, SortLetters
from rollyard_myenv.reward import SortedMatch


@hookimpl
def register_rollouts(register):
    register(SortLetters)


@hookimpl
def register_rewards(register):
    register(SortedMatch)


@hookimpl
def add_options(group):
    group.add_argument("--myenv-num-tasks", type=int, default=DEFAULT_NUM_TASKS,
                       help="distinct words, split 80/20 into train and eval")
    group.add_argument("--myenv-word-length", type=int, default=DEFAULT_WORD_LENGTH,
                       help="letters per word")
