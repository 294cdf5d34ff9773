"""The fold: the one `Ledger` every decider reads (evolve), the acceptance rules that say which events it takes, and the records and views derived from folded state."""
