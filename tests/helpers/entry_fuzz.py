"""The shared pieces of the entry fuzzers (tests/kernels/test_entry_fuzz_*.py): one seeded
hypothesis profile and the rule every entry keeps on any input: it returns, or it raises a
LaunchError with an R-* code and a hint, never another exception."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

from pipelink.runtime import LaunchError

REFUSED = object()  # what `outcome` returns for a coded refusal


def fuzz_settings(max_examples: int):
    """Deterministic (derandomize: the same examples every run, no example database) and fast.

    A longer hunt, outside CI: PIPELINK_FUZZ_SCALE=<n> runs n times the examples and
    PIPELINK_FUZZ_RANDOM=1 draws new ones, reproducible with pytest's --hypothesis-seed:
        PIPELINK_FUZZ_SCALE=50 PIPELINK_FUZZ_RANDOM=1 .venv/bin/python -m pytest \\
            tests/kernels/test_entry_fuzz_moe.py --hypothesis-seed=7
    """
    scale = max(int(os.environ.get("PIPELINK_FUZZ_SCALE", "1") or 1), 1)
    fixed = os.environ.get("PIPELINK_FUZZ_RANDOM", "") != "1"
    return settings(max_examples=max_examples * scale, derandomize=fixed, database=None, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture])


def outcome(fn, *args, **kw):
    """fn's result, or REFUSED for a LaunchError with an R-* code and a hint; any other exception
    fails the test (it escaped the entry's checks)."""
    try:
        return fn(*args, **kw)
    except LaunchError as e:
        assert e.code.startswith("R-") and e.hint.strip(), f"{e.code} without a hint: {e}"
        return REFUSED
