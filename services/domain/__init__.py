"""Pure domain code shared by the services' deciders (no I/O, clock, randomness or logging)."""
