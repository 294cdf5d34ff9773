"""Pure domain code shared by the services' deciders (no I/O, clock, randomness or logging),
in sub-packages by role: `fold` (the one `Ledger` and its acceptance rules), `policy` (rules
over the folded state: queue order, pending reasons, quota, schedules, ...), `inputs` (strict
parsing of what users write) and `tooling` (what every decider is built from). docs/architecture.md
maps each event to where it is decided, folded and projected."""
