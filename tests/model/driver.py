"""Drives a :mod:`tests.model.resume_model` program through the real library (issue 23).

The program's tools and model are made for one face (sync: plain functions, batches
from threads of ``redrive.executor()``; async: ``async def``, batches from
``asyncio.gather``). Every body appends to an outside side-effect ledger; every live
answer is unique (``"{what}#{n}"``), so a caller handed another caller's answer shows.
A crash is a boundary hook raising a BaseException at the n-th passage of a step's
boundary (the run is abandoned unexited, as a SIGKILL leaves it) or a retryable error.

``entry`` is a module-level entrypoint (recorded by the runs) that runs the *current*
program: what ``redrive.what_changed`` and ``redrive.check_run`` re-drive.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import gc
import itertools
import os
import threading
from collections.abc import Callable
from typing import Any

import redrive
from redrive.replay import set_boundary_hook
from tests.model.resume_model import Call, Item, callers

ENTRYPOINT = "tests.model.driver:entry"
RETRY = "<retry signal>"

try:
    from pydantic_ai import ModelRetry as RetrySignal
except ImportError:  # pragma: no cover - the dev extra installs it

    class RetrySignal(Exception):  # type: ignore[no-redef]
        """Stands in for pydantic-ai's ModelRetry when it is not installed."""


class Killed(BaseException):
    """A kill at a step boundary: the run is abandoned, never exited."""


class Interrupted(Exception):
    """A stop the run is told is resumable (``retryable=(Interrupted,)``)."""


@dataclasses.dataclass
class World:
    """Everything outside the runs.

    Attributes:
        ledger: (name, arg, idempotency key) of every tool body that ran.
        produced: every live answer handed out, in order.
        unique_tools: tool answers carry a counter (False under live_tools, whose re-runs
            are compared with the record).
    """

    ledger: list[tuple[str, str, str | None]] = dataclasses.field(default_factory=list)
    produced: list[Any] = dataclasses.field(default_factory=list)
    unique_tools: bool = True
    counter: Any = dataclasses.field(default_factory=itertools.count)
    lock: Any = dataclasses.field(default_factory=threading.Lock)
    retried: set[tuple[str, str]] = dataclasses.field(default_factory=set)
    by_key: dict[str | None, Any] = dataclasses.field(default_factory=dict)
    ledger_file: str | None = None

    def answer(self, what: str, unique: bool = True) -> str:
        """A live answer, unique unless told otherwise."""
        with self.lock:
            got = f"{what}#{next(self.counter)}" if unique else what
            self.produced.append(got)
            return got

    def body(self, name: str, arg: str, retry_signal: bool) -> str:
        """A tool body: one ledger line, maybe a retry signal, then the answer."""
        with self.lock:
            self.ledger.append((name, arg, redrive.idempotency_key()))
            if self.ledger_file is not None:  # outside the process: survives a SIGKILL
                with open(self.ledger_file, "a") as fh:
                    fh.write(f"{name} {arg} {redrive.idempotency_key()}\n")
                    fh.flush()
                    os.fsync(fh.fileno())
            first = (name, arg) not in self.retried
            if retry_signal and first:
                self.retried.add((name, arg))
        if retry_signal and first:
            raise RetrySignal(f"{name} busy, try again")
        got = self.answer(f"{name}({arg})", self.unique_tools)
        self.by_key[redrive.idempotency_key()] = got
        return got


@dataclasses.dataclass
class Crash:
    """Raise ``how`` at the ``nth`` passage of ``boundary`` by a step named ``name``."""

    boundary: str
    name: str
    nth: int
    how: str = "kill"
    seen: int = 0
    fired: bool = False

    def __call__(self, boundary: str, info: dict[str, Any]) -> None:
        if boundary != self.boundary or info["name"] != self.name or self.fired:
            return
        self.seen += 1
        if self.seen == self.nth:
            self.fired = True
            raise Killed() if self.how == "kill" else Interrupted()


def step_name(call: Call) -> str:
    """The journaled name of ``call``'s step."""
    return "model:chat" if call.kind == "model" else call.name


def _tool(world: World, call: Call, face: str) -> Callable[..., Any]:
    declaration: dict[str, Any] = (
        {"read_only": True} if call.kind == "read" else {"restart_safe": False}
    )
    name, retry = call.name, call.retry_signal
    if call.added_default:

        def body(arg: str, priority: str = "normal") -> Any:
            return world.body(name, arg, retry)
    else:

        def body(arg: str) -> Any:  # type: ignore[misc]
            return world.body(name, arg, retry)

    fn: Callable[..., Any] = body
    if face == "async":
        plain = body

        async def abody(*args: Any, **kwargs: Any) -> Any:
            await asyncio.sleep(0)
            return plain(*args, **kwargs)

        abody.__signature__ = __import__("inspect").signature(body)  # type: ignore[attr-defined]
        fn = abody
    fn.__name__ = fn.__qualname__ = name
    made: Callable[..., Any] = redrive.tool(**declaration)(fn)
    return made


class Program:
    """A model program made callable through one face of the real library."""

    def __init__(self, items: tuple[Item, ...], world: World, face: str) -> None:
        self.items, self.world, self.face = items, world, face
        self.tools: dict[tuple[str, bool, bool], Callable[..., Any]] = {}
        for _caller, _flow, call in callers(items):
            if call.kind in ("effect", "read"):
                key = (call.name, call.added_default, call.retry_signal)
                self.tools.setdefault(key, _tool(world, call, face))

        if face == "async":

            @redrive.model
            async def chat(prompt: str) -> str:
                await asyncio.sleep(0)
                return world.answer(prompt)

        else:

            @redrive.model
            def chat(prompt: str) -> str:  # type: ignore[misc]
                return world.answer(prompt)

        self.chat = chat

    def _fn(self, call: Call) -> tuple[Callable[..., Any], tuple[Any, ...]]:
        if call.kind == "model":
            return self.chat, (call.arg,)
        if call.kind in ("effect", "read"):
            return self.tools[(call.name, call.added_default, call.retry_signal)], (call.arg,)
        if call.kind == "approval":
            return _decision, (call.name,)
        return (redrive.now if call.name == "now" else redrive.uuid4), ("v",)

    def sync_call(self, call: Call) -> Any:
        fn, args = self._fn(call)
        return fn(*args)

    async def async_call(self, call: Call) -> Any:
        fn, args = self._fn(call)
        got = fn(*args)
        return await got if asyncio.iscoroutine(got) else got

    def run_sync(self, got: dict[str, Any]) -> dict[str, Any]:
        """The loop, sync face: fills ``got`` (caller -> answer) as answers arrive."""
        batches = iter(_batch_callers(self.items))
        for item in self.items:
            if isinstance(item, Call):
                caller = next(batches)[0]
                self._one_sync(item, caller, got)
                continue
            names = next(batches)
            with redrive.executor(max_workers=len(item.calls)) as pool:
                futures = [pool.submit(self.sync_call, c) for c in item.calls]
                for caller, future in zip(names, futures, strict=True):
                    got[caller] = future.result()
        return got

    def _one_sync(self, call: Call, caller: str, got: dict[str, Any]) -> None:
        if not call.retry_signal:
            got[caller] = self.sync_call(call)
            return
        try:
            got[caller] = self.sync_call(call)
        except RetrySignal:  # the loop's framework asks again; any other error ends it
            got[caller] = RETRY
            got[caller + "'"] = self.sync_call(call)

    async def run_async(self, got: dict[str, Any]) -> dict[str, Any]:
        """The loop, async face."""
        batches = iter(_batch_callers(self.items))
        for item in self.items:
            if isinstance(item, Call):
                caller = next(batches)[0]
                if not item.retry_signal:
                    got[caller] = await self.async_call(item)
                    continue
                try:
                    got[caller] = await self.async_call(item)
                except RetrySignal:
                    got[caller] = RETRY
                    got[caller + "'"] = await self.async_call(item)
                continue
            names = next(batches)
            # every member runs to its end, as the sync face's pool does; the loop sees the
            # answers in member order up to the first error, which it raises (as sync does)
            answers = await asyncio.gather(
                *(self.async_call(c) for c in item.calls), return_exceptions=True
            )
            for caller, answer in zip(names, answers, strict=True):
                if isinstance(answer, BaseException):
                    raise answer
                got[caller] = answer
        return got


def _decision(name: str) -> Any:
    decision = redrive.await_approval(name)
    return ("decision", decision.approved, decision.by)


def _batch_callers(items: tuple[Item, ...]) -> list[list[str]]:
    out: list[list[str]] = []
    listed = list(callers(items))
    i = 0
    for item in items:
        n = 1 if isinstance(item, Call) else len(item.calls)
        out.append([c for c, _f, _call in listed[i : i + n]])
        i += n
    return out


@dataclasses.dataclass
class Observed:
    """What one real attempt did."""

    got: dict[str, Any]
    error: BaseException | None
    bodies: list[tuple[str, str, str | None]]
    status: str
    warned: int = 0


#: The program ``entry`` runs (set by the test before what-changed / check).
CURRENT: list[Program] = []


def entry() -> None:
    """The recorded entrypoint (sync face): runs the current program in the active run."""
    CURRENT[0].run_sync({})


async def aentry() -> None:
    """The recorded entrypoint (async face): runs the current program in the active run."""
    await CURRENT[0].run_async({})


def attempt(
    journal: Any,
    run_id: str,
    program: Program,
    options: dict[str, Any],
    crash: Crash | None = None,
) -> Observed:
    """One attempt of ``program`` in run ``run_id`` (a context of its own), as it ends."""
    import warnings

    got: dict[str, Any] = {}
    before = len(program.world.ledger)
    error: BaseException | None = None
    entrypoint = ENTRYPOINT if program.face == "sync" else ENTRYPOINT.replace("entry", "aentry")
    options = {"entrypoint": entrypoint, "retryable": (Interrupted,), **options}

    async def main() -> None:
        run = redrive.run(journal, run_id, **options)
        if program.face == "async":
            await run.__aenter__()
        else:
            run.__enter__()
        try:
            if program.face == "async":
                await program.run_async(got)
            else:
                program.run_sync(got)
        except Killed:
            raise
        except BaseException as exc:
            if program.face == "async":
                handled = await run.__aexit__(type(exc), exc, exc.__traceback__)
            else:
                handled = run.__exit__(type(exc), exc, exc.__traceback__)
            if not handled:
                raise
            return
        if program.face == "async":
            await run.__aexit__(None, None, None)
        else:
            run.__exit__(None, None, None)

    if crash is not None:
        set_boundary_hook(crash)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            if program.face == "async":
                contextvars.copy_context().run(asyncio.run, main())
            else:
                contextvars.copy_context().run(_complete, main())
        except BaseException as exc:  # a crash, a run error, a divergence: observed
            error = exc
        finally:
            if crash is not None:
                set_boundary_hook(None)
    gc.collect()  # an abandoned run lets go of its in-process hold
    record = journal.get_run(run_id)
    warned = sum(1 for w in caught if w.category is redrive.ReplayDriftWarning)
    return Observed(
        got,
        error,
        program.world.ledger[before:],
        record.status if record else "none",
        warned,
    )


def _complete(main: Any) -> None:
    try:
        main.send(None)
    except StopIteration:
        return
    raise RuntimeError("the sync face awaited something that suspends")
