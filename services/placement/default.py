"""The `default` scorer (ours): placeholder, tuned below."""

from __future__ import annotations

from .scorers import Fgd, register


class DefaultScorer(Fgd):
    name = "default"


register(DefaultScorer())
