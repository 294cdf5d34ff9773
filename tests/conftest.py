"""Test-wide settings: in CI (CI=true) hypothesis runs derandomized, so a run is
reproducible and a red build always reproduces; locally it keeps exploring new examples."""

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")
