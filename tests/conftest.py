"""Shared fixtures: the ``--runslow`` switch, Hypothesis profiles, the ``drive`` fixture
(one loop, both faces) and the PostgreSQL test database.

Hypothesis profiles: ``default`` (30 examples, for the edit-test loop), ``ci`` (50,
derandomized so a CI failure reproduces, no deadline) and ``thorough`` (2,000, for a
deep local run); a costly property takes its own three counts from :func:`examples`
(docs/testing.md). ``HYPOTHESIS_PROFILE=name``
picks one; otherwise ``CI=true`` picks ``ci``. A test's own ``@settings``
(e.g. ``max_examples``) still wins over the profile for the values it sets.

Postgres tests use the server named by ``REDRIVE_PG_URL`` (default
``postgresql://postgres@127.0.0.1:5432/test``). Each test gets a schema of
its own, dropped afterwards. When ``CI=true`` an unreachable server fails
the tests; elsewhere they skip with instructions.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import gc
import os
import uuid
import warnings
from collections.abc import Callable, Coroutine, Generator, Iterator, Mapping
from pathlib import Path
from typing import Any, Literal, NamedTuple, TypeVar, overload

import pytest
from hypothesis import HealthCheck, settings

import redrive
from redrive.replay import set_boundary_hook

#: Hypothesis settings profiles, by name.
PROFILES: dict[str, settings] = {
    "default": settings(max_examples=30, deadline=None),
    "ci": settings(
        max_examples=50,
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


def hypothesis_profile(environ: Mapping[str, str] = os.environ) -> str:
    """The Hypothesis profile to load: ``HYPOTHESIS_PROFILE``, else ``ci`` under ``CI=true``.

    Raises:
        ValueError: ``HYPOTHESIS_PROFILE`` names no registered profile.
    """
    name = environ.get("HYPOTHESIS_PROFILE") or ("ci" if environ.get("CI") == "true" else "default")
    if name not in PROFILES:
        raise ValueError(f"HYPOTHESIS_PROFILE={name!r}: use one of {', '.join(sorted(PROFILES))}")
    return name


settings.load_profile(hypothesis_profile())


def examples(*, default: int, ci: int, thorough: int) -> int:
    """How many examples a costly property runs under the loaded profile.

    For a property whose one example costs far more than the others' (a journal file
    opened, a dozen CLI calls): pass it as ``@settings(max_examples=examples(...))`` so
    its count follows the profile as the others' do (docs/testing.md lists them).

    Returns:
        ``default``, ``ci`` or ``thorough``, by :func:`hypothesis_profile`.
    """
    return {"default": default, "ci": ci, "thorough": thorough}[hypothesis_profile()]


PG_URL = os.environ.get("REDRIVE_PG_URL") or "postgresql://postgres@127.0.0.1:5432/test"

_HOW_TO = (
    "start PostgreSQL on 127.0.0.1:5432 with a database 'test' that user 'postgres' can use "
    "without a password (e.g. `docker run -d -p 5432:5432 -e POSTGRES_DB=test "
    "-e POSTGRES_HOST_AUTH_METHOD=trust postgres:16`), or point REDRIVE_PG_URL at one, "
    "then run `pytest -m postgres`"
)


def pytest_sessionstart(session: pytest.Session) -> None:
    """Import every module of redrive before the first test (their asserts rewritten now).

    pytest rewrites the asserts of the plugin's package (redrive) when a module is first
    imported. A module first imported by a test, while a garbage collection finalizes
    what an earlier test left open (an event loop, a socket: a ResourceWarning from
    ``__del__``), can fail inside CPython 3.11's AST constructor with "AST constructor
    recursion depth mismatch". Imported here, no test's garbage exists yet. A module whose
    optional extra is not installed is skipped as it would be anyway.
    """
    import importlib
    import pkgutil

    for module in pkgutil.walk_packages(redrive.__path__, "redrive."):
        # the demo registers tools at import: they would join every run's fingerprint
        if module.name.endswith("__main__") or module.name.startswith("redrive.demo"):
            continue
        try:
            importlib.import_module(module.name)
        except Exception:  # an optional extra missing: the tests that need it skip
            continue


@pytest.fixture(autouse=True)
def _finalize_the_tests_garbage() -> Iterator[None]:
    """After each test, finalize the young garbage it left (cheap: generations 0 and 1).

    An SDK client or event loop a test (or a framework, e.g. the Agents SDK's
    ``run_sync``) leaves unclosed warns from ``__del__`` when collected; under
    ``filterwarnings = error`` that is an unraisable exception, charged to whichever later
    test the collector happens to run in (seen in a full run: a match-view property
    failed on a socket an SDK test had left). Collected here, it is charged to nobody.
    """
    yield
    _close_the_default_loop()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect(1)


def _close_the_default_loop() -> None:
    """Close the thread's default event loop a framework's ``run_sync`` left open.

    The Agents SDK's and pydantic-ai's ``run_sync`` run on the thread's default loop and
    leave it open; a later ``asyncio.run`` drops it from the policy, and a full collection
    in some later test finds it unclosed, in a cycle whose self-pipe socket was finalized
    first: its ``__del__`` fails closing fd -1, an unraisable error charged to that test
    (seen in a whole run: a teardown error in test_agents_session_guard). Read without
    making one (the policy's own slot; nothing when the policy keeps none).
    """
    policy = asyncio.get_event_loop_policy()
    loop = getattr(getattr(policy, "_local", None), "_loop", None)
    if isinstance(loop, asyncio.AbstractEventLoop) and not loop.is_running():
        if not loop.is_closed():
            loop.close()
        policy.set_event_loop(None)


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


@pytest.fixture(params=["duckdb", "postgres"])
def journal_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A journal URL, once per SQL backend: a DuckDB file in ``tmp_path``, then
    ``REDRIVE_PG_URL?schema=<a fresh schema>`` (for CLI tests on both journals)."""
    if request.param == "duckdb":
        return str(tmp_path / "runs.duckdb")
    url: str = request.getfixturevalue("pg_url")
    return f"{url}?schema={request.getfixturevalue('pg_schema')}"


# -- one loop, both faces ------------------------------------------------------------------

Face = Literal["sync", "async"]
T = TypeVar("T")


class Call(NamedTuple):
    """One step a loop asks for: the wrapped tool or model function and its arguments."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


#: A loop program: a generator that yields the steps it calls and gets their results back
#: (a step's exception is thrown into it at the ``yield``); its return value is the output.
Loop = Generator[Call, Any, Any]


#: What the last call gave: (its result, None) or (None, the exception it raised).
Outcome = tuple[Any, BaseException | None]


def _advance(gen: Loop, outcome: Outcome) -> tuple[bool, Any]:
    """Hand ``gen`` the last call's outcome; return ``(False, next call)`` or ``(True, value)``."""
    value, error = outcome
    try:
        return False, gen.throw(error) if error is not None else gen.send(value)
    except StopIteration as stop:
        return True, stop.value


class Step:
    """A tool or model made for one face; calling it gives the :class:`Call` a loop yields."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.redrive_tool: Any = getattr(fn, "redrive_tool", None)

    def __call__(self, *args: Any, **kwargs: Any) -> Call:
        return Call(self.fn, args, kwargs)


class Ran(NamedTuple):
    """What :meth:`Drive.run` returns: the exited run and the loop's return value."""

    run: redrive.Run
    value: Any


class DriveCrash(BaseException):
    """Stands for a SIGKILL at a step boundary (raised by :meth:`Drive.crash`'s hook)."""


class Drive:
    """Runs one loop program through the sync face or the async face of redrive.

    Sync: ``with redrive.run(...)`` and sync tools/models; async: ``async with
    redrive.run(...)`` under ``asyncio.run`` and ``async def`` tools/models. The
    test writes its tools as plain functions and its loop once, as a generator
    (``result = yield tool(args)``); the drive makes the rest.

    Attributes:
        face: ``"sync"`` or ``"async"``.
        last_run: the run most recently entered by :meth:`run` (for tests whose
            run raises).
    """

    def __init__(self, face: Face) -> None:
        self.face = face
        self.last_run: redrive.Run | None = None

    def _for_face(self, body: Callable[..., Any]) -> Callable[..., Any]:
        """``body`` itself (sync), or an ``async def`` with its name and signature (async)."""
        if self.face == "sync":
            return body

        @functools.wraps(body)
        async def async_body(*args: Any, **kwargs: Any) -> Any:
            await asyncio.sleep(0)  # a real suspension point, as an awaited call has
            return body(*args, **kwargs)

        return async_body

    @overload
    def tool(self, body: Callable[..., Any], /, **declaration: Any) -> Step: ...

    @overload
    def tool(
        self, body: None = None, /, **declaration: Any
    ) -> Callable[[Callable[..., Any]], Step]: ...

    def tool(
        self, body: Callable[..., Any] | None = None, /, **declaration: Any
    ) -> Step | Callable[[Callable[..., Any]], Step]:
        """``@redrive.tool(**declaration)`` over ``body`` made for this face.

        Use as ``@drive.tool`` or ``@drive.tool(restart_safe=False)``.

        Returns:
            A :class:`Step` (or a decorator making one).
        """

        return self._recorded(redrive.tool, body, declaration)

    @overload
    def model(self, body: Callable[..., Any], /, **options: Any) -> Step: ...

    @overload
    def model(
        self, body: None = None, /, **options: Any
    ) -> Callable[[Callable[..., Any]], Step]: ...

    def model(
        self, body: Callable[..., Any] | None = None, /, **options: Any
    ) -> Step | Callable[[Callable[..., Any]], Step]:
        """``@redrive.model(**options)`` over ``body`` made for this face.

        Returns:
            A :class:`Step` (or a decorator making one).
        """

        return self._recorded(redrive.model, body, options)

    def _recorded(
        self, recorder: Any, body: Callable[..., Any] | None, options: dict[str, Any]
    ) -> Step | Callable[[Callable[..., Any]], Step]:
        """``recorder(**options)`` over ``body`` made for this face (or a decorator doing it)."""

        def make(fn: Callable[..., Any]) -> Step:
            return Step(recorder(**options)(self._for_face(fn)))

        return make(body) if body is not None else make

    def _face(self, main: Coroutine[Any, Any, T]) -> T:
        """Run ``main`` in a context of its own: under ``asyncio.run`` for the async face;
        for the sync face stepped once by hand (it never awaits anything that suspends)."""
        if self.face == "async":
            return asyncio.run(main)  # the run's context lives and dies in asyncio.run's task
        return contextvars.copy_context().run(_complete_now, main)

    async def _call(self, step: Call) -> Any:
        result = step.fn(*step.args, **step.kwargs)
        return await result if self.face == "async" else result

    def call(self, step: Call) -> Any:
        """Make one call outside any run (the wrapped function as a plain call)."""
        return self._face(self._call(step))

    async def _steps(self, gen: Loop) -> Any:
        """Drive ``gen``, calling (sync face) or awaiting (async face); return its value."""
        outcome: Outcome = (None, None)
        while True:
            done, item = _advance(gen, outcome)
            if done:
                return item
            try:
                outcome = (await self._call(item), None)
            except BaseException as exc:
                outcome = (None, exc)

    def run(
        self,
        journal: Any,
        run_id: str,
        loop: Callable[[redrive.Run], Loop],
        **options: Any,
    ) -> Ran:
        """Run ``loop(run)`` inside ``redrive.run(journal, run_id, **options)``, exited cleanly
        (``with`` for the sync face, ``async with`` for the async one).

        Returns:
            The run (exited) and the loop's return value.

        Raises:
            Whatever the run or the loop raises (the run's exit has seen it first).
        """
        self.last_run = None

        async def main() -> Ran:
            if self.face == "sync":
                with redrive.run(journal, run_id, **options) as run:
                    self.last_run = run
                    value = await self._steps(loop(run))
            else:
                async with redrive.run(journal, run_id, **options) as run:
                    self.last_run = run
                    value = await self._steps(loop(run))
            return Ran(run, value)

        return self._face(main())

    def crash(
        self,
        journal: Any,
        run_id: str,
        point: str,
        name: str,
        loop: Callable[[redrive.Run], Loop],
        *,
        occurrence: int = 1,
        **options: Any,
    ) -> None:
        """Run ``loop`` and abandon the run, unexited, when step ``name`` reaches ``point``.

        As a SIGKILL leaves it: the run's exit never runs. ``point`` is a boundary of
        :func:`redrive.replay.set_boundary_hook`; ``occurrence`` picks which passage (1-based).

        Raises:
            AssertionError: the loop ended without reaching the point.
        """
        seen = [0]

        def hook(boundary: str, info: dict[str, Any]) -> None:
            if boundary == point and info["name"] == name:
                seen[0] += 1
                if seen[0] == occurrence:
                    raise DriveCrash

        set_boundary_hook(hook)
        try:
            self.enter_only(journal, run_id, loop, **options)
        except DriveCrash:
            return
        finally:
            set_boundary_hook(None)
        raise AssertionError(f"the loop never reached {point} of {name}")

    def enter_only(
        self,
        journal: Any,
        run_id: str,
        loop: Callable[[redrive.Run], Loop],
        **options: Any,
    ) -> Any:
        """Run ``loop(run)`` in a run that is entered and never exited, as a SIGKILL leaves it.

        Returns:
            The loop's return value (the run is still not exited: no ``run_end``).

        Raises:
            Whatever the loop raises; the run's exit never sees it.
        """

        async def main() -> Any:
            run = redrive.run(journal, run_id, **options)
            if self.face == "sync":
                run.__enter__()
            else:
                await run.__aenter__()
            self.last_run = run
            return await self._steps(loop(run))

        self.last_run = None
        return self._face(main())


def _complete_now(main: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine that never suspends to its end, without an event loop."""
    try:
        main.send(None)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
    main.close()
    raise RuntimeError("the sync face awaited something that suspends")


@pytest.fixture(params=["sync", "async"])
def drive(request: pytest.FixtureRequest) -> Drive:
    """A :class:`Drive` for the sync face, then for the async face (each test runs twice)."""
    return Drive(request.param)
