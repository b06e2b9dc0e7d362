"""The clash test's plugin (tests/isolation): the toy task, on openai 2.6.1 only."""
