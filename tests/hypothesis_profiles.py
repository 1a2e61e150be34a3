"""Hypothesis profiles of the property-based tests (imported by those test modules).

``ci`` (the default): few examples, drawn the same way on every run (``derandomize``), no
deadline (a command line call takes from milliseconds to a second or two, depending on
what was imported before) and no example database, so a test run writes nothing into the
repository. ``long``: many examples, randomised — ``HYPOTHESIS_PROFILE=long pytest
tests/test_paths.py`` for a thorough search.
"""
from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", max_examples=25, deadline=None, derandomize=True, database=None,
    suppress_health_check=[HealthCheck.too_slow])
settings.register_profile(
    "long", max_examples=300, deadline=None, database=None,
    suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
