"""Decider tooling: the service shape both shells drive, the shared `LedgerService` base, deterministic event stamping, the event/placement-model adapter and time formatting for messages."""
