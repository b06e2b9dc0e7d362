"""Entry point of rollyard-codegolf. Light: heavy work is imported inside methods."""
