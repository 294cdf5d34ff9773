"""Everything a user writes, parsed strictly: configuration, scenario and job documents, friendly quantities, GPU model names and MIG layouts. Pure (no file I/O: callers pass text or data)."""
