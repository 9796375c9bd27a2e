"""Shared pytest set-up. Fixtures that start real parts live in tests/support/ (one module each)."""

pytest_plugins = [
    "tests.support.serving",  # first: the others import it
    "tests.support.paths",
    "tests.support.postgres",
    "tests.support.controlplane",
    "tests.support.agents",
    "tests.support.tokens",
]
