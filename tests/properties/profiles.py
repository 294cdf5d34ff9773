"""How many examples a property runs, by hypothesis profile (registered in tests/conftest.py).

- default / `ci`: the count each property names (CI's is derandomized: a red build
  reproduces);
- `ci-random`: a time-boxed randomized pass for CI (`.ci/run` runs it after the main suite
  with a printed `--hypothesis-seed`); the count the property names for it, else the default;
- `deep`: at least `DEEP` examples of every property, any seed
  (`pytest tests/properties --hypothesis-profile=deep`).

A count named in `@settings` overrides the profile's, so properties take theirs from
`examples` rather than naming one.
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings

DEEP = 2000


def examples(n: int, ci_random: int | None = None, **kw) -> settings:
    """Settings for a property that runs `n` examples under the default and `ci` profiles."""
    profile = settings.get_current_profile_name()
    if profile == "deep":
        n = max(n, DEEP)
    elif profile == "ci-random" and ci_random is not None:
        n = ci_random
    kw.setdefault("suppress_health_check", [HealthCheck.too_slow])
    return settings(max_examples=n, deadline=None, **kw)
