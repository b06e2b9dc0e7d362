"""Entry point of rollyard-verifiers. Light: verifiers is imported inside methods."""
