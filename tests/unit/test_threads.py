"""Threads and tasks that lost the run's context never run a step unrecorded.

A tool, ``redrive.model`` callable or wrapped client called from a thread
whose context carries no run joins the one run active in the process, or fails
closed with :class:`~redrive.replay.LostRunContextError` when several are
active; outside any run it is a plain call. Side effects are counted in lists
kept outside the runs.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import pickle
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import redrive
from redrive.frames import Kind
from redrive.replay import LostRunContextError, _context
from redrive.storage import Journal, MemoryJournal

Call = tuple[Callable[..., Any], tuple[Any, ...]]

#: Dispatch methods usable from sync code (the sync face, and the async face's loop).
SYNC_METHODS = ("pool_submit", "nested_pools", "thread", "redrive_executor")
#: Dispatch methods that need a running event loop (the async face only).
ASYNC_METHODS = ("to_thread", "run_in_executor", "run_in_redrive_executor")
CASES = [("sync", m) for m in SYNC_METHODS] + [("async", m) for m in SYNC_METHODS + ASYNC_METHODS]


@pytest.fixture(params=["memory", "duckdb", "postgres"])
def journal(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Journal]:
    """The reference journal, the DuckDB default and Postgres (all written from threads)."""
    j: Journal
    if request.param == "memory":
        j = MemoryJournal()
    elif request.param == "duckdb":
        j = redrive.open_journal(str(tmp_path / "runs.duckdb"))
    else:
        from redrive.storage.postgres import PostgresJournal

        j = PostgresJournal(
            request.getfixturevalue("pg_url"), schema=request.getfixturevalue("pg_schema")
        )
    yield j
    j.close()


@pytest.fixture(autouse=True)
def _own_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test sees only the runs it enters (runs other tests abandoned are not active)."""
    monkeypatch.setattr(_context, "_entered", {})


def _pool_submit(calls: list[Call]) -> list[Any]:
    with concurrent.futures.ThreadPoolExecutor(len(calls)) as pool:
        futures = [pool.submit(fn, *args) for fn, args in calls]
        return [f.result() for f in futures]


def _nested_pools(calls: list[Call]) -> list[Any]:
    with concurrent.futures.ThreadPoolExecutor(1) as outer:
        return outer.submit(_pool_submit, calls).result()


def _thread(calls: list[Call]) -> list[Any]:
    results: list[Any] = [None] * len(calls)
    errors: list[BaseException] = []

    def target(i: int, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        try:
            results[i] = fn(*args)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=target, args=(i, *c)) for i, c in enumerate(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


def _redrive_executor(calls: list[Call]) -> list[Any]:
    with redrive.replay.executor(max_workers=len(calls)) as pool:
        futures = [pool.submit(fn, *args) for fn, args in calls]
        return [f.result() for f in futures]


async def _all(awaitables: list[Any]) -> list[Any]:
    """Await every one (none left running), then raise the first error or return the results."""
    results = await asyncio.gather(*awaitables, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return list(results)


async def _to_thread(calls: list[Call]) -> list[Any]:
    return await _all([asyncio.to_thread(fn, *args) for fn, args in calls])


async def _run_in_executor(
    calls: list[Call], pool: concurrent.futures.Executor | None = None
) -> list[Any]:
    loop = asyncio.get_running_loop()
    return await _all(
        [loop.run_in_executor(pool, functools.partial(fn, *args)) for fn, args in calls]
    )


SYNC_DISPATCH: dict[str, Callable[[list[Call]], list[Any]]] = {
    "pool_submit": _pool_submit,
    "nested_pools": _nested_pools,
    "thread": _thread,
    "redrive_executor": _redrive_executor,
}


async def dispatch(method: str, calls: list[Call]) -> list[Any]:
    """Run ``calls`` in parallel by ``method`` (from a coroutine, on a loop or stepped by hand)."""
    if method == "to_thread":
        return await _to_thread(calls)
    if method == "run_in_executor":
        return await _run_in_executor(calls)
    if method == "run_in_redrive_executor":
        with redrive.replay.executor(len(calls)) as pool:
            return await _run_in_executor(calls, pool)
    return SYNC_DISPATCH[method](calls)


def _complete_now(main: Any) -> Any:
    try:
        main.send(None)
    except StopIteration as stop:
        return stop.value
    raise AssertionError("the sync face awaited something that suspends")


def in_run(
    face: str,
    journal: Journal,
    run_id: str,
    loop: Callable[[], Any],
    *,
    abandon: bool = False,
) -> Any:
    """Run the coroutine ``loop()`` inside ``redrive.run(journal, run_id)`` with ``face``.

    With ``abandon``, the run is entered and never exited, as a crash leaves it
    (then forgotten by the registry, as the dead process would be). The run takes
    no lease (``lease=None``, also on Postgres): an abandoned Run of this process
    would keep renewing one, as a frozen worker does (a lease's takeover after a
    real kill is tested in ``tests/crash/test_workers.py``).

    Returns:
        The loop's value.
    """

    async def main() -> Any:
        run = redrive.run(journal, run_id, lease=None)
        if face == "sync":
            run.__enter__()
        else:
            await run.__aenter__()
        try:
            value = await loop()
        except BaseException as exc:
            if abandon:
                raise
            if face == "sync":
                run.__exit__(type(exc), exc, exc.__traceback__)
            else:
                await run.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        if abandon:
            _context._leave(run)
            return value
        run.finish(value)
        if face == "sync":
            run.__exit__(None, None, None)
        else:
            await run.__aexit__(None, None, None)
        return value

    if face == "async":
        return asyncio.run(main())
    return contextvars.copy_context().run(_complete_now, main())


def _kinds(journal: Journal, run_id: str) -> list[str]:
    return [f.kind for f in journal.frames(run_id)]


def payment_tools(effects: list[str]) -> tuple[Callable[..., str], Callable[..., str]]:
    """Two side-effecting tools that append to ``effects`` (not restart safe)."""

    @redrive.tool(restart_safe=False)
    def charge_card(order: str, cents: int) -> str:
        effects.append(f"charge {order}")
        return f"charged {order} {cents}"

    @redrive.tool(restart_safe=False)
    def send_invoice(order: str) -> str:
        effects.append(f"invoice {order}")
        return f"invoiced {order}"

    return charge_card, send_invoice


def payment_loop(method: str, effects: list[str], order: str) -> Callable[[], Any]:
    """A loop charging and invoicing ``order`` in parallel by ``method`` (effects logged)."""
    charge_card, send_invoice = payment_tools(effects)

    async def loop() -> list[Any]:
        return await dispatch(method, [(charge_card, (order, 500)), (send_invoice, (order,))])

    return loop


@pytest.mark.parametrize(("face", "method"), CASES)
def test_a_call_that_lost_the_context_joins_the_only_run(
    face: str, method: str, journal: Journal
) -> None:
    """Parallel tools dispatched without the context are recorded, then replay without running."""
    effects: list[str] = []
    loop = payment_loop(method, effects, "o1")
    out = in_run(face, journal, "job:1", loop)
    assert out == ["charged o1 500", "invoiced o1"]
    assert sorted(effects) == ["charge o1", "invoice o1"]
    kinds = _kinds(journal, "job:1")
    assert kinds.count(Kind.TOOL_START) == 2 and kinds.count(Kind.TOOL_DONE) == 2
    assert in_run(face, journal, "job:1", loop) == out
    assert len(effects) == 2


@pytest.mark.parametrize(("face", "method"), CASES)
def test_a_redelivery_after_a_crash_never_charges_twice(
    face: str, method: str, journal: Journal
) -> None:
    """A run abandoned after its threaded tools ran resumes without running them again."""
    effects: list[str] = []
    loop = payment_loop(method, effects, "o2")
    first = in_run(face, journal, "job:2", loop, abandon=True)
    assert Kind.RUN_END not in _kinds(journal, "job:2")
    assert in_run(face, journal, "job:2", loop) == first
    assert sorted(effects) == ["charge o2", "invoice o2"]
    assert _kinds(journal, "job:2")[-1] == Kind.RUN_END


@pytest.mark.parametrize(("face", "method"), CASES)
def test_a_model_callable_that_lost_the_context_joins_the_only_run(face: str, method: str) -> None:
    """A ``redrive.model`` callable called from a thread is a model step; replay calls nothing."""
    journal = MemoryJournal()
    asked: list[str] = []

    @redrive.model
    def plan(prompt: str) -> str:
        asked.append(prompt)
        return f"plan for {prompt}"

    async def loop() -> list[Any]:
        return await dispatch(method, [(plan, ("a",)), (plan, ("b",))])

    out = in_run(face, journal, "m1", loop)
    assert out == ["plan for a", "plan for b"] and sorted(asked) == ["a", "b"]
    assert _kinds(journal, "m1").count(Kind.MODEL_RESPONSE) == 2
    assert in_run(face, journal, "m1", loop) == out
    assert len(asked) == 2


def test_two_runs_active_in_two_threads_fail_closed() -> None:
    """Two runs active: a call from a thread with no run is ambiguous; it raises, runs nothing."""
    journal = MemoryJournal()
    effects: list[str] = []
    charge_card, _ = payment_tools(effects)
    entered, done = threading.Barrier(3), threading.Event()

    def worker(run_id: str) -> None:
        with redrive.run(journal, run_id):
            entered.wait()
            done.wait()

    threads = [threading.Thread(target=worker, args=(f"r{i}",)) for i in (1, 2)]
    for t in threads:
        t.start()
    entered.wait()
    try:
        with pytest.raises(LostRunContextError) as info:
            _pool_submit([(charge_card, ("o3", 100))])
    finally:
        done.set()
        for t in threads:
            t.join()
    err = info.value
    assert isinstance(err, RuntimeError) and isinstance(err, redrive.ReplayError)
    assert err.run_ids == ("r1", "r2") and err.step == "tool 'charge_card'"
    assert err.thread is not None and err.thread in str(err)
    assert "copy_context" in str(err) and "redrive.executor" in str(err)
    assert "asyncio.to_thread" in str(err)
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is LostRunContextError and back.to_fields() == err.to_fields()
    assert effects == []
    assert Kind.TOOL_START not in _kinds(journal, "r1") + _kinds(journal, "r2")


def test_two_runs_in_two_tasks_fail_closed_and_the_redrive_executor_joins_its_own() -> None:
    """Two async runs on one loop: run_in_executor fails closed, redrive's executor joins right."""
    journal = MemoryJournal()
    effects: list[str] = []
    charge_card, _ = payment_tools(effects)
    both = asyncio.Event()
    entered: list[str] = []

    async def job(run_id: str) -> tuple[str, str]:
        async with redrive.run(journal, run_id) as run:
            entered.append(run_id)
            if len(entered) == 2:
                both.set()
            await both.wait()
            with pytest.raises(LostRunContextError):
                await _run_in_executor([(charge_card, (run_id, 1))])
            out = _redrive_executor([(charge_card, (run_id, 2))])[0]
            run.finish(out)
        return out, run_id

    async def main() -> list[tuple[str, str]]:
        return list(await asyncio.gather(job("t1"), job("t2")))

    assert asyncio.run(main()) == [("charged t1 2", "t1"), ("charged t2 2", "t2")]
    assert sorted(effects) == ["charge t1", "charge t2"]
    for run_id in ("t1", "t2"):
        starts = [f for f in journal.frames(run_id) if f.kind == Kind.TOOL_START]
        assert len(starts) == 1


def test_the_redrive_executor_with_a_run_joins_that_run() -> None:
    """``executor(run=run)`` runs its tasks in that run, even submitted from a bare thread."""
    journal = MemoryJournal()
    effects: list[str] = []
    charge_card, _ = payment_tools(effects)
    with redrive.run(journal, "x1") as run, redrive.run(journal, "x2"):
        with redrive.replay.executor(2, run=run) as pool:
            out = _thread([(lambda: pool.submit(charge_card, "o9", 1).result(), ())])
        run.finish(out)
    assert out == ["charged o9 1"]
    assert Kind.TOOL_START in _kinds(journal, "x1")
    assert Kind.TOOL_START not in _kinds(journal, "x2")


def test_outside_any_run_a_threaded_call_is_plain() -> None:
    """With no run active, a tool called from a pool is a plain call: no error, no warning."""
    effects: list[str] = []
    charge_card, _ = payment_tools(effects)
    assert _pool_submit([(charge_card, ("o4", 1))]) == ["charged o4 1"]
    assert effects == ["charge o4"]


def test_a_pool_call_without_the_context_records_like_one_with_it() -> None:
    """A pool call that lost the context is a step of the run, as one with copy_context is."""
    journal = MemoryJournal()

    @redrive.tool
    def send_email(to: str) -> str:
        return to

    with redrive.run(journal, "threads"), concurrent.futures.ThreadPoolExecutor(1) as pool:
        assert pool.submit(send_email, "a@x").result() == "a@x"
        assert pool.submit(contextvars.copy_context().run, send_email, "b@x").result() == "b@x"
    assert [f.kind for f in journal.frames("threads")].count("tool_start") == 2


def test_an_abandoned_sync_run_in_this_thread_is_not_joined() -> None:
    """A sync run left unexited in the calling thread is not on its stack: a plain call follows."""
    journal = MemoryJournal()
    effects: list[str] = []
    charge_card, _ = payment_tools(effects)

    def abandon() -> None:
        redrive.run(journal, "gone").__enter__()

    contextvars.copy_context().run(abandon)
    assert charge_card("o5", 1) == "charged o5 1"
    assert Kind.TOOL_START not in _kinds(journal, "gone")


# --- property ---------------------------------------------------------------------------

TOOL_KINDS = ("unsafe", "read_only", "async_tool", "model")


def _make_step(kind: str, ran: list[str]) -> Callable[[str], Any]:
    """A recorded callable of ``kind`` that logs each body execution in ``ran``."""

    def body(key: str) -> str:
        ran.append(key)
        return f"{kind} {key}"

    if kind == "unsafe":
        return redrive.tool(name="charge", restart_safe=False)(body)
    if kind == "read_only":
        return redrive.tool(name="get_status", read_only=True)(body)
    if kind == "model":
        return redrive.model(name="model:complete")(body)

    async def send(key: str) -> str:
        await asyncio.sleep(0)
        return body(key)

    asend = redrive.tool(name="send", restart_safe=False)(send)
    return lambda key: asyncio.run(asend(key))  # an async tool, on the thread's own loop


@given(
    face=st.sampled_from(["sync", "async"]),
    batches=st.lists(
        st.tuples(
            st.sampled_from(SYNC_METHODS + ASYNC_METHODS),
            st.lists(st.sampled_from(TOOL_KINDS[:3]), min_size=1, max_size=3)
            | st.lists(st.just("model"), min_size=1, max_size=3),
        ),
        min_size=1,
        max_size=3,
    ),
)
def test_no_body_runs_unrecorded(face: str, batches: list[tuple[str, list[str]]]) -> None:
    """Property: whatever the dispatch and step kinds, every executed body's outcome is
    journaled, and a replay runs no body. (A batch is tools or models: model and tool
    calls in flight together are issue 11 item 6, another part's.)"""
    _context._entered.clear()
    journal = MemoryJournal()
    ran: list[str] = []
    steps = {kind: _make_step(kind, ran) for kind in TOOL_KINDS}
    sync_only = face == "sync"
    usable = [
        ("pool_submit" if sync_only and m in ASYNC_METHODS else m, kinds) for m, kinds in batches
    ]

    async def loop() -> list[Any]:
        out = []
        for b, (method, kinds) in enumerate(usable):
            calls: list[Call] = [(steps[k], (f"{b}.{i}.{k}",)) for i, k in enumerate(kinds)]
            out.append(await dispatch(method, calls))
        return out

    out = in_run(face, journal, "p", loop)
    frames = journal.frames("p")
    outcomes = [f for f in frames if f.kind in (Kind.TOOL_DONE, Kind.MODEL_RESPONSE)]
    assert len(outcomes) == len(ran) == sum(len(kinds) for _, kinds in usable)
    executed = len(ran)
    assert in_run(face, journal, "p", loop) == out
    assert len(ran) == executed


def test_outside_run_keeps_a_threaded_call_plain_while_a_run_is_active() -> None:
    """Inside ``outside_run()`` (e.g. a server's other endpoint), a pool call joins no run."""
    journal = MemoryJournal()
    effects: list[str] = []
    charge_card, _ = payment_tools(effects)

    def other_endpoint() -> list[Any]:
        with redrive.replay.outside_run():
            return _redrive_executor([(charge_card, ("o6", 1))])

    with redrive.run(journal, "busy") as run:
        assert _thread([(other_endpoint, ())]) == [["charged o6 1"]]
        run.finish(None)
    assert effects == ["charge o6"] and Kind.TOOL_START not in _kinds(journal, "busy")


@pytest.mark.parametrize("face", ["sync", "async"])
def test_a_tool_body_fanning_out_with_the_redrive_executor_stays_one_step(face: str) -> None:
    """A body that runs tools on redrive's executor keeps them inside its one outcome."""
    journal = MemoryJournal()
    effects: list[str] = []
    charge_card, send_invoice = payment_tools(effects)

    @redrive.tool(restart_safe=False)
    def checkout(order: str) -> list[Any]:
        return _redrive_executor([(charge_card, (order, 5)), (send_invoice, (order,))])

    async def loop() -> Any:
        return await dispatch("pool_submit", [(checkout, ("o7",))])

    out = in_run(face, journal, "co", loop)
    assert out == [["charged o7 5", "invoiced o7"]]
    assert [f.name for f in journal.frames("co") if f.kind == Kind.TOOL_START] == ["checkout"]
    assert in_run(face, journal, "co", loop) == out and len(effects) == 2


def _http_client(sent: list[str]) -> Any:
    """A sync httpx client whose transport records in the current run (a mock model server)."""
    import httpx2

    from redrive.recorders.http import HttpRecorder, RecordingTransport

    def handler(request: httpx2.Request) -> httpx2.Response:
        sent.append(request.content.decode())
        return httpx2.Response(200, json={"answer": request.content.decode()})

    recorder = HttpRecorder(provider="test", base_path="/v1")
    transport: Any = RecordingTransport(httpx2.MockTransport(handler), recorder)
    return httpx2.Client(transport=transport, base_url="http://model.test/v1")


@pytest.mark.parametrize(("face", "method"), CASES)
def test_a_wrapped_client_that_lost_the_context_joins_the_only_run(face: str, method: str) -> None:
    """A wrapped client's request from a thread is a model step; replay sends nothing."""
    journal = MemoryJournal()
    sent: list[str] = []
    client = _http_client(sent)

    def ask(q: str) -> Any:
        return client.post("/chat", content=q).json()["answer"]

    async def loop() -> list[Any]:
        return await dispatch(method, [(ask, ("a",)), (ask, ("b",))])

    out = in_run(face, journal, "w1", loop)
    assert out == ["a", "b"] and sorted(sent) == ["a", "b"]
    assert _kinds(journal, "w1").count(Kind.MODEL_RESPONSE) == 2
    assert in_run(face, journal, "w1", loop) == out
    assert len(sent) == 2


def test_a_task_created_before_the_run_joins_it() -> None:
    """An asyncio task made before the run (so without it in its context) joins the run."""
    journal = MemoryJournal()
    effects: list[str] = []

    @redrive.tool(restart_safe=False)
    async def charge_card(order: str) -> str:
        effects.append(order)
        return f"charged {order}"

    async def job() -> str:
        go = asyncio.Event()

        async def early() -> str:
            await go.wait()
            return await charge_card("o8")

        task = asyncio.create_task(early())
        async with redrive.run(journal, "early") as run:
            go.set()
            out = await task
            run.finish(out)
        return out

    assert asyncio.run(job()) == "charged o8" and effects == ["o8"]
    assert asyncio.run(job()) == "charged o8" and effects == ["o8"]
    assert _kinds(journal, "early").count(Kind.TOOL_START) == 1


CARRY_CONTEXT = ("redrive_executor", "to_thread", "run_in_redrive_executor")


@given(
    methods=st.lists(st.sampled_from(SYNC_METHODS + ASYNC_METHODS), min_size=2, max_size=2),
    kinds=st.lists(st.sampled_from(TOOL_KINDS[:3]), min_size=1, max_size=3),
)
def test_with_two_runs_active_no_body_runs_unrecorded(methods: list[str], kinds: list[str]) -> None:
    """Property: with two runs active, a dispatch that lost the context fails closed and runs
    nothing; one that carries it records each body in the run that called it."""
    _context._entered.clear()
    journal = MemoryJournal()
    ran: list[str] = []
    steps = {kind: _make_step(kind, ran) for kind in TOOL_KINDS}
    both_in, both_done = asyncio.Barrier(2), asyncio.Barrier(2)

    async def job(run_id: str, method: str) -> None:
        async with redrive.run(journal, run_id) as run:
            await both_in.wait()  # both runs are active during both dispatches
            calls: list[Call] = [(steps[k], (f"{run_id}.{i}",)) for i, k in enumerate(kinds)]
            if method in CARRY_CONTEXT:
                await dispatch(method, calls)
            else:
                with pytest.raises(LostRunContextError):
                    await dispatch(method, calls)
            await both_done.wait()
            run.finish(None)

    async def main() -> None:
        await asyncio.gather(*(job(f"r{i}", m) for i, m in enumerate(methods)))

    asyncio.run(main())
    for i, method in enumerate(methods):
        run_id = f"r{i}"
        mine = sorted(key for key in ran if key.startswith(f"{run_id}."))
        done = [f for f in journal.frames(run_id) if f.kind == Kind.TOOL_DONE]
        assert len(done) == len(mine) == (len(kinds) if method in CARRY_CONTEXT else 0)
