"""Node sets as operators write them (Slurm hostlists): names and ranges separated by commas
outside brackets, `node-[1-3,7],gpu-a`; a range keeps its zero padding (`n[01-03]`). Read by
the node verbs of the CLI and by the configuration's `reservations:`; one place, one rule."""

from __future__ import annotations

import re

RANGE = re.compile(r"^(?P<head>[^\[\]]*)\[(?P<body>[0-9,\-]+)\](?P<tail>[^\[\]]*)$")


def expand_nodes(text: str) -> list[str]:
    """Node names from `NODES`: names and Slurm-style ranges separated by commas outside
    brackets (`node-[1-3,7],gpu-a`; a range keeps its zero padding, `n[01-03]`), in the order
    given, each once. ValueError (one line) for a malformed range or name."""
    from gpuledger.events.ids import validate_token

    parts, depth, cur = [], 0, ""
    for ch in text:
        depth += (ch == "[") - (ch == "]")
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    out: list[str] = []
    for part in parts:
        m = RANGE.match(part)
        names = [part]
        if m is not None:
            names = []
            for item in m["body"].split(","):
                lo, _, hi = item.partition("-")
                if not lo or (hi == "" and "-" in item) or (hi and int(hi) < int(lo)):
                    raise ValueError(f"node range {part!r}: {item!r} is not N or N-M (N <= M)")
                width = len(lo) if lo.startswith("0") else 0
                for i in range(int(lo), int(hi or lo) + 1):
                    names.append(f"{m['head']}{i:0{width}d}{m['tail']}")
        for name in names:
            validate_token("node", name)
            if name not in out:
                out.append(name)
    return out
