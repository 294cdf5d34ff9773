"""Did you mean: a GPU model a job names that no GPU has (issue 44, item 8).

Pure (stdlib only). Where the cluster is known (`check CONFIG JOB`, admission's fleet) a model
no GPU of it has is an error, and `suggestion` names the closest model it does have; where it
is not (`check JOB` alone), `unknown_models` names the models outside gpuledger's vocabulary
(services/domain/inputs/gpu_models.py: `H100-8GB` is not a model, `H100-80G` is `H100-80GB`)
for a warning.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from gpuledger.services.domain.inputs.gpu_models import CANONICAL, canonical, key


def suggestion(name: str, known: Iterable[str]) -> str:
    """` (did you mean 'X'?)` for the model of `known` closest to `name` (compared by the
    vocabulary's key, so `h100_8g` finds `H100-80GB`), or `` when none is close."""
    by_key: dict[str, str] = {}
    for k in sorted(known):
        by_key.setdefault(key(k), k)
    close = difflib.get_close_matches(key(name), list(by_key), n=1, cutoff=0.6)
    return f" (did you mean {by_key[close[0]]!r}?)" if close else ""


def unknown_models(names: Iterable[str]) -> list[str]:
    """One warning line (without `warning: `) per name that gpuledger's vocabulary does not
    know, in the order given: such a job runs only where a node declares exactly that name."""
    return [
        f"models: {n!r} is not a GPU model gpuledger knows{suggestion(n, CANONICAL)}; "
        "check the job against the cluster: gpuledger check CONFIG JOB"
        for n in names
        if canonical(n) is None
    ]
