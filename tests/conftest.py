"""Test-wide settings: in CI (CI=true) hypothesis runs derandomized, so a run is
reproducible and a red build always reproduces; locally it keeps exploring new examples.

Two more profiles (`--hypothesis-profile=NAME`; counts per property in
tests/properties/profiles.py): `deep` runs at least 2,000 examples of every property with
a random seed; `ci-random` is the time-boxed randomized pass `.ci/run` runs after the main
suite, with the seed printed (`--hypothesis-seed`). Failures print the reproducing blob."""

import os

from hypothesis import HealthCheck, settings

settings.register_profile("ci", derandomize=True, print_blob=True)
settings.register_profile(
    "deep",
    max_examples=2000,
    derandomize=False,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("ci-random", derandomize=False, deadline=None, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")
