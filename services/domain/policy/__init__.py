"""Policy as pure functions of the folded state: queue order and pending reasons, quota arithmetic, schedules, time limits, decayed usage, dependencies, job shapes and MIG re-geometry."""
