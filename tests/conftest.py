"""Shared fixtures: the ``--runslow`` switch, Hypothesis profiles and the PostgreSQL database.

Hypothesis profiles: ``default`` (fast, for the edit-test loop), ``ci`` (more
examples, derandomized so a CI failure reproduces, no deadline) and
``thorough`` (many examples, for a deep local run). ``HYPOTHESIS_PROFILE=name``
picks one; otherwise ``CI=true`` picks ``ci``. A test's own ``@settings``
(e.g. ``max_examples``) still wins over the profile for the values it sets.

Postgres tests use the server named by ``REDRIVE_PG_URL`` (default
``postgresql://postgres@127.0.0.1:5432/test``). Each test gets a schema of
its own, dropped afterwards. When ``CI=true`` an unreachable server fails
the tests; elsewhere they skip with instructions.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

#: Hypothesis settings profiles, by name.
PROFILES: dict[str, settings] = {
    "default": settings(max_examples=30, deadline=None),
    "ci": settings(
        max_examples=200,
        derandomize=True,
        deadline=None,
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow],
    ),
    "thorough": settings(
        max_examples=2000,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    ),
}
for _name, _profile in PROFILES.items():
    settings.register_profile(_name, _profile)


def hypothesis_profile(environ: dict[str, str] | os._Environ[str] = os.environ) -> str:
    """The Hypothesis profile to load: ``HYPOTHESIS_PROFILE``, else ``ci`` under ``CI=true``.

    Raises:
        ValueError: ``HYPOTHESIS_PROFILE`` names no registered profile.
    """
    name = environ.get("HYPOTHESIS_PROFILE") or ("ci" if environ.get("CI") == "true" else "default")
    if name not in PROFILES:
        raise ValueError(f"HYPOTHESIS_PROFILE={name!r}: use one of {', '.join(sorted(PROFILES))}")
    return name


settings.load_profile(hypothesis_profile())

PG_URL = os.environ.get("REDRIVE_PG_URL") or "postgresql://postgres@127.0.0.1:5432/test"

_HOW_TO = (
    "start PostgreSQL on 127.0.0.1:5432 with a database 'test' that user 'postgres' can use "
    "without a password (e.g. `docker run -d -p 5432:5432 -e POSTGRES_DB=test "
    "-e POSTGRES_HOST_AUTH_METHOD=trust postgres:16`), or point REDRIVE_PG_URL at one, "
    "then run `pytest -m postgres`"
)


def pytest_addoption(parser: pytest.Parser) -> None:
    """Add ``--runslow`` (run tests marked ``slow``)."""
    parser.addoption("--runslow", action="store_true", default=False, help="run tests marked slow")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip ``slow`` tests unless ``--runslow`` is given."""
    if config.getoption("--runslow"):
        return
    skip = pytest.mark.skip(reason="slow: run with --runslow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


def _unreachable(reason: str) -> None:
    message = f"PostgreSQL at {PG_URL} is not reachable ({reason})"
    if os.environ.get("CI") == "true":
        pytest.fail(f"{message}; CI needs it: {_HOW_TO}", pytrace=False)
    pytest.skip(f"{message}; to run these tests {_HOW_TO}")


@pytest.fixture(scope="session")
def pg_url() -> str:
    """The URL of a reachable PostgreSQL test database (skips, or fails under CI=true)."""
    try:
        import psycopg
    except ImportError as exc:  # pragma: no cover - the dev extra installs it
        _unreachable(f"psycopg is not installed: {exc}; pip install 'redrive[postgres]'")
        raise
    try:
        with psycopg.connect(PG_URL, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        _unreachable(str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc))
    return PG_URL


@pytest.fixture
def pg_schema(pg_url: str) -> Iterator[str]:
    """A fresh Postgres schema name for one test; the schema is dropped afterwards."""
    import psycopg
    from psycopg import sql

    name = f"t_{uuid.uuid4().hex[:16]}"
    yield name
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))
