"""Runs: record, replay, resume, strict divergence, lifecycle (DESIGN invariants 1-5)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

import redrive
from redrive.frames import Kind
from redrive.storage import Journal, MemoryJournal
from redrive.storage.duckdb import DuckDBJournal
from tests.handles import worker_handle


@pytest.fixture(params=["memory", "duckdb"])
def journal(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Journal]:
    """Every core behaviour holds on the reference journal and on the DuckDB default."""
    j: Journal = (
        MemoryJournal()
        if request.param == "memory"
        else DuckDBJournal(str(tmp_path / "runs.duckdb"))
    )
    yield j
    j.close()


class Counter:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def count(self, name: str) -> int:
        return sum(1 for n, _ in self.calls if n == name)


@pytest.fixture
def world() -> Counter:
    return Counter()


def make_loop(world: Counter) -> Any:
    @redrive.model
    def ask(messages: list[dict[str, str]]) -> dict[str, Any]:
        world.calls.append(("model", messages[-1]["content"]))
        n = len(messages)
        return {"text": f"answer {n}", "tool": ["lookup", "send"][n % 2]}

    @redrive.tool(read_only=True)
    def lookup(customer: str) -> dict[str, str]:
        world.calls.append(("lookup", customer))
        return {"customer": customer, "tier": "gold"}

    @redrive.tool
    def send_email(to: str, subject: str) -> str:
        world.calls.append(("send_email", subject))
        return f"sent:{subject}"

    def loop(subject: str = "Refund", crash_after: str | None = None) -> list[Any]:
        messages = [{"role": "user", "content": "help"}]
        out: list[Any] = []
        first = ask(messages)
        out.append(first)
        out.append(lookup("c-42"))
        if crash_after == "lookup":
            raise ConnectionError("worker lost its connection")
        messages.append({"role": "assistant", "content": first["text"]})
        out.append(ask(messages))
        out.append(send_email("a@example.com", subject))
        out.append(str(redrive.uuid4()))
        return out

    return loop


def test_replay_of_finished_run_makes_no_calls(journal: Journal, world: Counter) -> None:
    """Replaying a finished run makes zero model calls and zero tool executions."""
    loop = make_loop(world)
    with redrive.run(journal, "r1", input={"q": "help"}) as run:
        out = run.finish(loop())
    assert run.status == "succeeded" and run.live_steps == 5
    before = list(world.calls)
    with redrive.run(journal, "r1", input={"q": "help"}) as again:
        assert again.finished and again.output == out
        assert loop() == out
    assert world.calls == before
    assert again.replayed_steps == 5 and again.live_steps == 0


def test_resume_runs_only_unfinished_steps(journal: Journal, world: Counter) -> None:
    """A resumed run makes exactly the live calls the interrupted run had not finished."""
    loop = make_loop(world)
    with pytest.raises(ConnectionError), redrive.run(journal, "r2") as run:
        loop(crash_after="lookup")
    assert run.status == "paused"  # a transient error: paused, resumable, with why
    assert [r.run_id for r in journal.runs(status="paused")] == ["r2"]
    world.calls.clear()
    with redrive.run(journal, "r2") as run:
        run.finish(loop())
    assert [n for n, _ in world.calls] == ["model", "send_email"]
    assert run.replayed_steps == 2 and run.live_steps == 3
    assert journal.interrupted_runs() == []


def test_strict_divergence_names_the_path(journal: Journal, world: Counter) -> None:
    """A drifted tool argument raises DivergenceError with a path-level diff."""
    loop = make_loop(world)
    with redrive.run(journal, "r3") as run:
        run.finish(loop())
    with pytest.raises(redrive.DivergenceError) as info, redrive.run(journal, "r3"):
        loop(subject="Refund request")
    err = info.value
    assert err.run_id == "r3" and err.name == "send_email"
    assert err.diff == [("$.subject", "Refund", "Refund request")]
    assert "$.subject: 'Refund' -> 'Refund request'" in str(err)
    assert err.expected_key != err.found_key
    assert any("lookup" in line for line in err.context)
    assert world.count("send_email") == 1


def test_in_flight_tool_blocks_unless_restart_safe(journal: Journal) -> None:
    """An in-flight non-restart-safe tool is never re-run silently; a restart-safe one is."""
    runs: list[str] = []

    @redrive.tool
    def charge_card(amount: int) -> str:
        runs.append("charge")
        return "ok"

    @redrive.tool(restart_safe=True)
    def sync_inventory(sku: str) -> str:
        runs.append("sync")
        return "synced"

    class Crash(BaseException):
        pass

    def crash_in_body(point: str, info: dict[str, Any]) -> None:
        if point == "tool_claimed":
            raise Crash

    for rid, fn, arg in (("b1", charge_card, 5), ("b2", sync_inventory, "x")):
        run = redrive.run(journal, rid)
        run.__enter__()  # a crash never reaches __exit__
        redrive.replay.set_boundary_hook(crash_in_body)
        try:
            with pytest.raises(Crash):
                fn(arg)
        finally:
            redrive.replay.set_boundary_hook(None)
            redrive.replay._context._current.set(None)
            redrive.replay._context._leave(run)
    assert runs == []
    with pytest.raises(redrive.SideEffectRetryBlockedError) as info, redrive.run(journal, "b1"):
        charge_card(5)
    assert info.value.seq == 1 and info.value.tool == "charge_card"
    assert info.value.arguments == {"amount": 5}
    assert "b1:1:charge_card" in str(info.value)
    with redrive.run(journal, "b2"):
        assert sync_inventory("x") == "synced"
    assert runs == ["sync"]


def test_parallel_tool_calls_replay_in_any_order(journal: Journal) -> None:
    """Tool calls issued from one model response replay in whatever order they arrive."""

    @redrive.tool(read_only=True)
    async def weather(city: str) -> str:
        await asyncio.sleep(0)
        return f"sunny in {city}"

    @redrive.model
    async def plan() -> list[str]:
        return ["Paris", "Oslo", "Lima"]

    async def loop(order: list[int]) -> list[str]:
        cities = await plan()
        results = await asyncio.gather(*(weather(cities[i]) for i in order))
        return sorted(results)

    async def main() -> None:
        async with redrive.run(journal, "p1") as run:
            first = run.finish(await loop([0, 1, 2]))
        async with redrive.run(journal, "p1") as again:
            assert await loop([2, 0, 1]) == first
        assert again.replayed_steps == 4

    asyncio.run(main())


def test_threads_with_copied_context(journal: Journal) -> None:
    """Threads that carry the context (copy_context) record and replay like tasks."""

    @redrive.tool(read_only=True)
    def fetch_page(n: int) -> str:
        return f"page {n}"

    def loop() -> list[str]:
        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            futures = [pool.submit(contextvars.copy_context().run, fetch_page, n) for n in range(3)]
            return [f.result() for f in futures]

    with redrive.run(journal, "t1") as run:
        out = run.finish(loop())
    with redrive.run(journal, "t1") as again:
        assert loop() == out
    assert run.live_steps == 3 and again.replayed_steps == 3


class QuotaError(Exception):
    pass


def test_recorded_tool_error_is_raised_again(journal: Journal) -> None:
    """A recorded tool exception is raised again as the same type on replay."""
    calls: list[int] = []

    @redrive.tool(read_only=True, retryable=(QuotaError,))
    def get_quota(user: str) -> int:
        calls.append(1)
        raise QuotaError(f"quota exceeded for {user}")

    for live in (True, False):  # a live resume re-attempts a retryable error that ended a run
        with (
            pytest.raises(QuotaError, match="quota exceeded for u1"),
            redrive.run(journal, "e1", live=live),
        ):
            get_quota("u1")
    assert calls == [1]
    record = journal.get_run("e1")
    assert record is not None and record.status == "paused"


def test_unrebuildable_error_becomes_recorded_tool_error(journal: Journal) -> None:
    """An exception type that cannot be rebuilt replays as RecordedToolError naming it."""

    class Odd(Exception):
        def __init__(self, a: int, b: int) -> None:
            super().__init__(f"{a}/{b}")

    @redrive.tool(read_only=True, retryable=(Odd,))
    def get_odd() -> None:
        raise Odd(1, 2)

    with pytest.raises(Odd), redrive.run(journal, "e2"):
        get_odd()
    with pytest.raises(redrive.RecordedToolError) as info, redrive.run(journal, "e2", live=False):
        get_odd()
    assert "Odd" in info.value.error_type and info.value.error_message == "1/2"


def test_non_retryable_error_fails_the_run(journal: Journal) -> None:
    """A non-retryable tool error marks the run failed; re-executing it is refused."""

    @redrive.tool
    def submit_order(sku: str) -> None:
        raise ValueError("sku discontinued")

    with pytest.raises(ValueError), redrive.run(journal, "f1"):
        submit_order("x")
    assert journal.get_run("f1").status == "failed"  # type: ignore[union-attr]
    with pytest.raises(redrive.TerminalRunError, match="failed"), redrive.run(journal, "f1"):
        pass


def test_input_mismatch(journal: Journal) -> None:
    """Resuming with a different input raises RunInputMismatchError, a ValueError."""
    with redrive.run(journal, "i1", input={"ticket": 1}):
        pass
    with pytest.raises(ValueError) as info, redrive.run(journal, "i1", input={"ticket": 2}):
        pass
    assert isinstance(info.value, redrive.RunInputMismatchError)
    assert "$.ticket: 1 -> 2" in str(info.value)


def test_unknown_run_and_replay_only_miss(journal: Journal, world: Counter) -> None:
    """create=False on a missing run raises UnknownRunError; live=False refuses live calls."""
    with pytest.raises(LookupError), redrive.run(journal, "nope", create=False):
        pass
    loop = make_loop(world)
    with pytest.raises(ConnectionError), redrive.run(journal, "m1"):
        loop(crash_after="lookup")
    with pytest.raises(redrive.ReplayMissError) as info, redrive.run(journal, "m1", live=False):
        loop()
    assert info.value.name == "model:ask"


def test_finished_run_cannot_grow(journal: Journal, world: Counter) -> None:
    """A succeeded run's journal is complete: an extra step is a miss, fewer is a divergence."""
    loop = make_loop(world)
    with redrive.run(journal, "g1") as run:
        run.finish(loop())

    @redrive.tool(read_only=True)
    def extra() -> int:
        return 1

    with pytest.raises(redrive.ReplayMissError), redrive.run(journal, "g1"):
        loop()
        extra()
    with pytest.raises(redrive.DivergenceError, match="more steps"), redrive.run(journal, "g1"):
        pass


def test_outside_a_run_is_pass_through(world: Counter) -> None:
    """Wrapped functions outside any run are plain calls."""
    loop = make_loop(world)
    assert loop()[3] == "sent:Refund"
    assert redrive.current_run() is None and redrive.idempotency_key() is None


def test_model_commit_modes(journal: Journal, monkeypatch: pytest.MonkeyPatch) -> None:
    """Model frames: written at once without an fsync (default), held ('group'), or fsynced."""

    @redrive.model
    def ask(q: str) -> str:
        return q.upper()

    syncs: list[bool] = []
    real = type(journal).append

    def spy(self: Any, run_id: str, frames: Any, **kwargs: Any) -> None:
        syncs.append(kwargs.get("sync", True))
        real(self, run_id, frames, **kwargs)

    monkeypatch.setattr(type(journal), "append", spy)
    for run_id, mode, visible, synced in (
        ("c1", "write", 3, [False]),
        ("c2", "group", 1, []),
        ("c3", "each", 3, [True]),
    ):
        syncs.clear()
        with redrive.run(journal, run_id, model_commit=mode) as run:
            ask("a")
            assert journal.get_run(run_id).next_seq == visible  # type: ignore[union-attr]
            assert syncs == synced
        kinds = [f.kind for f in journal.frames(run_id)]
        assert kinds == [Kind.RUN_START, Kind.MODEL_REQUEST, Kind.MODEL_RESPONSE, Kind.RUN_END]
        assert run.status == "succeeded"


def test_async_context_manager(journal: Journal) -> None:
    """`async with redrive.run(...)` records and replays async tools and models."""

    @redrive.model
    async def ask(q: str) -> str:
        return q[::-1]

    @redrive.tool(read_only=True)
    async def get_len(s: str) -> int:
        return len(s)

    async def main() -> tuple[Any, Any]:
        async with redrive.run(journal, "a1") as run:
            run.finish(await get_len(await ask("abc")))
        async with redrive.run(journal, "a1") as again:
            assert await get_len(await ask("abc")) == 3
        return run, again

    run, again = asyncio.run(main())
    assert run.output == 3 and again.replayed_steps == 2


def test_durable_decorator_records_entrypoint(journal: Journal) -> None:
    """@redrive.durable records entrypoint and input; a second call returns the output."""
    calls: list[str] = []

    @redrive.durable(journal, run_id="job:{job_id}")
    def handle(job_id: int, text: str) -> str:
        calls.append(text)
        return text.upper()

    assert handle(7, "hi") == "HI"
    assert handle(7, "hi") == "HI"
    assert calls == ["hi"]
    record = journal.get_run("job:7")
    assert record is not None and record.entrypoint is not None
    assert record.entrypoint.endswith("test_durable_decorator_records_entrypoint.<locals>.handle")
    first = next(iter(journal.frames("job:7"))).data()
    assert first["input"] == {"job_id": 7, "text": "hi"}


def test_tool_arguments_named_like_model_ids_are_matched(journal: Journal) -> None:
    """A tool's own `call_id` or nested `id` arguments are data: changing them diverges."""

    @redrive.tool
    def hang_up(call_id: str) -> str:
        return f"hung up {call_id}"

    @redrive.tool
    def assign(employee: dict[str, Any]) -> int:
        return int(employee["id"])

    with redrive.run(journal, "ids") as run:
        run.finish([hang_up("CALL-A"), assign({"id": 1, "function": "billing"})])
    with (
        pytest.raises(redrive.DivergenceError, match=r"\$\.call_id"),
        redrive.run(journal, "ids", live=False),
    ):
        hang_up("CALL-B")
    with (
        pytest.raises(redrive.DivergenceError, match=r"\$\.employee\.id"),
        redrive.run(journal, "ids", live=False),
    ):
        hang_up("CALL-A")
        assign({"id": 999, "function": "billing"})


def test_model_call_moved_before_a_tool_diverges(journal: Journal) -> None:
    """Tools of a turn commute, but a model call moved ahead of a recorded tool diverges."""

    @redrive.model
    def llm(prompt: str) -> str:
        return prompt

    @redrive.tool
    def charge_card(amount: int) -> dict[str, int]:
        return {"charged": amount}

    with redrive.run(journal, "order") as run:
        run.finish([llm("plan"), charge_card(10), llm("summarize")])
    with pytest.raises(redrive.DivergenceError) as info, redrive.run(journal, "order", live=False):
        llm("plan")
        llm("summarize")
    assert info.value.name == "charge_card" and info.value.found_name == "model:llm"


def test_replay_only_run_never_writes(journal: Journal, world: Counter) -> None:
    """A live=False run that raises leaves the journal exactly as it was."""
    loop = make_loop(world)
    with pytest.raises(ConnectionError), redrive.run(journal, "ro"):
        loop(crash_after="lookup")
    before = [f.chain for f in journal.frames("ro")]
    with pytest.raises(AssertionError), redrive.run(journal, "ro", live=False):
        raise AssertionError("debugging: stopped while replaying")
    assert [f.chain for f in journal.frames("ro")] == before
    assert journal.get_run("ro").status == "paused"  # type: ignore[union-attr]


def test_system_exit_leaves_the_run_resumable(journal: Journal, world: Counter) -> None:
    """SystemExit (a deploy's SIGTERM handler) leaves the run running, like a crash."""
    loop = make_loop(world)
    with pytest.raises(SystemExit), redrive.run(journal, "exit"):
        loop()
        raise SystemExit(0)
    assert journal.get_run("exit").status == "running"  # type: ignore[union-attr]


def test_retryable_mark_lives_on_the_exception(journal: Journal) -> None:
    """A handled retryable tool error does not make a later plain bug look retryable."""

    class RateLimited(Exception):
        pass

    @redrive.tool(read_only=True, retryable=(RateLimited,))
    def fetch_quote(n: int) -> int:
        raise RateLimited("slow down")

    for i in range(20):
        with pytest.raises(RuntimeError), redrive.run(journal, f"bug:{i}"):
            with contextlib.suppress(RateLimited):
                fetch_quote(1)
            raise RuntimeError("a plain bug")
        assert journal.get_run(f"bug:{i}").status == "failed"  # type: ignore[union-attr]


def test_durable_called_again_after_success_returns_output(journal: Journal) -> None:
    """A redelivered job whose run succeeded gets the recorded output, no error, no call."""
    effects: list[str] = []

    @redrive.tool
    def open_ticket(subject: str) -> dict[str, str]:
        effects.append(subject)
        return {"id": "T-1"}

    @redrive.durable(journal, run_id="d:{x}")
    def handle(x: int) -> dict[str, str]:
        return open_ticket(f"s{x}")  # type: ignore[no-any-return]

    assert handle(1) == {"id": "T-1"}
    assert handle(1) == {"id": "T-1"}
    assert effects == ["s1"]


def test_calls_inside_a_tool_body_belong_to_the_tool(journal: Journal) -> None:
    """now()/model calls inside a tool body are part of its one outcome, not run steps."""
    inner: list[str] = []

    @redrive.model
    def summarize(text: str) -> str:
        inner.append(text)
        return text[:3]

    @redrive.tool
    def file_report(text: str) -> dict[str, str]:
        assert redrive.current_run() is None and redrive.idempotency_key() is not None
        return {"at": str(redrive.now()), "summary": summarize(text)}

    with redrive.run(journal, "inner") as run:
        out = run.finish(file_report("hello"))
    with redrive.run(journal, "inner") as again:
        assert file_report("hello") == out
    assert inner == ["hello"] and again.replayed_steps == 1
    assert [f.kind for f in journal.frames("inner")].count("value") == 0


def test_redacted_input_is_not_journaled(journal: Journal) -> None:
    """redact= applies to the run's input too, and resuming with it still matches."""
    with redrive.run(journal, "sec", input={"token": "INPUT-SECRET", "q": 1}, redact=("$.token",)):
        pass
    first = next(iter(journal.frames("sec"))).data()
    assert first["input"] == {"token": "[REDACTED]", "q": 1}
    assert b"INPUT-SECRET" not in b"".join(f.payload for f in journal.frames("sec"))
    with redrive.run(
        journal, "sec", input={"token": "INPUT-SECRET", "q": 1}, redact=("$.token",)
    ) as again:
        assert again.finished


def _balance_tool() -> Any:
    @redrive.tool(read_only=True)
    def get_balance(account: str) -> dict[str, int]:
        return {"balance": 100}

    return get_balance


def _refused_as_altered(path: str, get_balance: Any) -> None:
    """Replay run ``b:1`` of ``path``: the altered tool result is refused, not replayed."""
    journal = DuckDBJournal(path)
    with (
        pytest.raises(redrive.JournalCorruptError) as info,
        redrive.run(journal, "b:1", live=False),
    ):
        get_balance("A")
    assert info.value.seq == 2 and info.value.last_good_seq == 1
    journal.close()


def test_replay_checks_the_chain_of_a_run_in_the_tables(tmp_path: Path) -> None:
    """A frame altered in DuckDB's tables is refused with JournalCorruptError, not replayed."""
    import duckdb

    from redrive.frames import encode

    path = str(tmp_path / "runs.duckdb")
    journal = DuckDBJournal(path)
    get_balance = _balance_tool()
    with redrive.run(journal, "b:1") as run:
        run.finish(get_balance("A"))
    journal.checkpoint()  # a recently ended run stays in the log at close; move it
    journal.close()
    con = duckdb.connect(path)
    altered = con.execute(
        "UPDATE redrive_frames SET payload = ? WHERE kind = 'tool_done'",
        [encode({"step": 1, "result": {"balance": 1_000_000}})],
    ).fetchall()
    con.close()
    assert altered == [(1,)]  # the frame was in the tables: the test alters what it checks
    _refused_as_altered(path, get_balance)


def test_replay_checks_the_chain_of_a_run_held_in_the_log(tmp_path: Path) -> None:
    """A frame altered in the ``.rdlog`` (a recently ended run stays there at close), its
    record's checksum recomputed, is refused with JournalCorruptError, not replayed."""
    from redrive.frames import encode
    from redrive.storage._framelog import FrameLog
    from redrive.storage._sqlschema import FRAME_ATTRS

    path = str(tmp_path / "runs.duckdb")
    journal = DuckDBJournal(path)
    get_balance = _balance_tool()
    with redrive.run(journal, "b:1") as run:
        run.finish(get_balance("A"))
    journal.close()
    log = FrameLog(path + ".rdlog")
    records = list(log.records())
    kind, payload = FRAME_ATTRS.index("kind"), FRAME_ATTRS.index("payload")
    altered = 0
    for record in records:
        for frame in record[2] if record[0] == "frames" else ():
            if frame[kind] == "tool_done":
                frame[payload] = encode({"step": 1, "result": {"balance": 1_000_000}})
                altered += 1
    assert altered == 1  # the run is held in the log: the test alters what it checks
    log.rewrite(records)  # well-formed records with good checksums, one frame altered
    log.close()
    _refused_as_altered(path, get_balance)


def test_long_turn_replays_without_reading_ahead() -> None:
    """Strict replay of a long tool-only turn reads the journal lazily, not all at once."""
    journal = MemoryJournal()

    @redrive.tool(read_only=True)
    def get_item(n: int) -> int:
        return n

    with redrive.run(journal, "long") as run:
        run.finish([get_item(n) for n in range(300)])
    with redrive.run(journal, "long") as again:
        get_item(0)
        cursor = again._state.cursor
        assert cursor is not None and cursor._idx.reader.frames_read < 10
        for n in range(1, 300):
            get_item(n)
    assert again.replayed_steps == 300


def test_closing_a_streaming_run_early_leaves_it_resumable(journal: Journal) -> None:
    """A run driven by a generator that the consumer closes early stays running (resumable)."""

    @redrive.tool(read_only=True)
    def get_event(n: int) -> str:
        return f"event {n}"

    def stream_events() -> Iterator[str]:
        with redrive.run(journal, "gen"):
            for n in range(5):
                yield get_event(n)

    events = stream_events()
    assert next(events) == "event 0"
    events.close()
    record = journal.get_run("gen")
    assert record is not None and record.status == "running" and record.error is None
    assert list(stream_events()) == [f"event {n}" for n in range(5)]  # resumed to its end
    assert journal.get_run("gen").status == "succeeded"  # type: ignore[union-attr]


def test_run_by_url_reuses_one_journal(tmp_path: Path) -> None:
    """redrive.run(path, ...) shares one journal per file in a process (no leak, no twin)."""
    from redrive.storage import shared_journal

    path = str(tmp_path / "shared.duckdb")

    @redrive.tool
    def charge_card(amount: int) -> int:
        return amount

    runs = []
    for i in range(5):
        with redrive.run(path, f"job:{i}") as run:
            charge_card(i)
        runs.append(run)
    assert len({id(r.journal) for r in runs}) == 1
    assert runs[0].journal is shared_journal(path)
    with redrive.run(path, "job:0") as again:
        charge_card(0)
    assert again.replayed_steps == 1
    runs[0].journal.close()


def test_a_worker_without_a_lease_cannot_write_to_a_leased_run(journal: Journal) -> None:
    """While one worker holds a run's lease, a worker without a lease is refused (fencing)."""

    @redrive.tool
    def transfer(amount: int) -> int:
        return amount

    with redrive.run(journal, "leased", lease=30.0) as holder:
        transfer(1)
        holder._block._appender.flush()
        with (
            pytest.raises(redrive.RunBusyError, match="leased by"),
            redrive.run(worker_handle(journal), "leased"),
        ):
            pass
        with (
            pytest.raises(redrive.RunBusyError),
            redrive.run(worker_handle(journal), "leased", on_busy="wait", busy_timeout=0.2),
        ):
            pass
        record = journal.get_run("leased")
        assert record is not None
        with pytest.raises(redrive.RunBusyError, match="no lease"):
            journal.append("leased", [], expected_seq=record.next_seq)
    with redrive.run(journal, "leased") as after:
        transfer(1)
    assert after.replayed_steps == 1


def test_transient_model_api_errors_leave_the_run_resumable(journal: Journal) -> None:
    """An SDK error with status 429/5xx, or a connection error, raised by a model step
    (``redrive.model``, which marks it ``retryable``), does not fail the run."""

    class APIStatusError(Exception):
        def __init__(self, status_code: int) -> None:
            super().__init__(f"status {status_code}")
            self.status_code = status_code

    class APIConnectionError(Exception):
        pass

    for i, (exc, status) in enumerate(
        [
            (APIStatusError(503), "paused"),
            (APIStatusError(429), "paused"),
            (APIConnectionError("reset"), "paused"),
            (APIStatusError(400), "failed"),
        ]
    ):

        @redrive.model
        def ask(prompt: str, exc: Exception = exc) -> str:
            raise exc

        with pytest.raises(type(exc)), redrive.run(journal, f"api:{i}"):
            ask("hi")
        assert journal.get_run(f"api:{i}").status == status  # type: ignore[union-attr]


def test_option_types_are_checked_before_anything_is_written(journal: Journal) -> None:
    """Misspelt or mistyped options fail at once with a clear TypeError; nothing is journaled."""
    for options in (
        {"max_attempts": "5"},
        {"lease": "30"},
        {"replya": "strict"},
        {"redact": "$.token"},
        {"live": "no"},
    ):
        with pytest.raises(TypeError):
            redrive.run(journal, "opts", **options)
    assert journal.get_run("opts") is None


def test_redact_covers_tool_results(journal: Journal) -> None:
    """redact= paths are also replaced in journaled tool results (the live caller sees them)."""

    @redrive.tool(read_only=True)
    def get_credentials(user: str) -> dict[str, str]:
        return {"user": user, "api-key": "TOOL-RESULT-SECRET"}

    with redrive.run(journal, "res", redact=("$..api-key",)):
        live = get_credentials("ada")
    assert live["api-key"] == "TOOL-RESULT-SECRET"
    assert b"TOOL-RESULT-SECRET" not in b"".join(f.payload for f in journal.frames("res"))
    with redrive.run(journal, "res", redact=("$..api-key",)):
        assert get_credentials("ada")["api-key"] == "[REDACTED]"


def test_blocked_retry_replays_as_the_same_block(journal: Journal) -> None:
    """A caught failure then a blocked retry replays (live=False) as the same block."""

    @redrive.tool
    def submit_payment(amount: int) -> str:
        raise ValueError("card declined")

    def loop() -> str:
        with contextlib.suppress(ValueError):
            submit_payment(5)
        try:
            submit_payment(5)
        except redrive.SideEffectRetryBlockedError:
            return "blocked"
        return "ran twice"

    with redrive.run(journal, "blk") as run:
        run.finish(loop())
    assert run.output == "blocked"
    with redrive.run(journal, "blk", live=False):
        assert loop() == "blocked"


def test_a_well_chained_frame_with_a_bad_payload_is_not_the_last_good_seq() -> None:
    """A frame whose chain holds but whose payload is malformed is reported, with seq - 1 good."""
    from redrive.frames import GENESIS, make_frame
    from redrive.storage import RunRecord

    journal = MemoryJournal()
    first = make_frame(
        run_id="bad",
        seq=0,
        kind=Kind.RUN_START,
        name="run",
        payload={"input": None},
        prev_chain=GENESIS,
    )
    journal.create_run(RunRecord(run_id="bad", input_fp=""), first)
    start = make_frame(
        run_id="bad",
        seq=1,
        kind=Kind.TOOL_START,
        name="t",
        payload=["not", "a", "map"],
        prev_chain=first.chain,
    )
    with pytest.raises(ValueError, match="payload"):  # the writer refuses it (one validator)
        journal.append("bad", [start], expected_seq=1)
    # as another process's bytes would put it there: the reader refuses it too
    journal._state.frames["bad"].append(start)
    journal._state.runs["bad"] = attrs.evolve(
        journal._state.runs["bad"], next_seq=2, last_chain=start.chain
    )
    with (
        pytest.raises(redrive.JournalCorruptError) as info,
        redrive.run(journal, "bad", live=False),
    ):
        pass
    assert info.value.seq == 1 and info.value.last_good_seq == 0


def test_model_step_handle_records_and_replays(journal: Journal) -> None:
    """begin_model hands a live step to record, then the recorded response, seq and partial flag."""

    def drive() -> tuple[redrive.replay.ModelStep, redrive.replay.ModelStep]:
        with redrive.run(journal, "handle:model", input=1) as run:
            whole = run.begin_model("model:m", {"q": 1})
            if not whole.recorded:
                assert whole.seq is None
                assert whole.record({"a": 1}, view={"provider": "test"}) == {"a": 1}
            cut = run.begin_model("model:m", {"q": 2})
            if not cut.recorded:
                cut.record({"a": "par"}, partial=True)
            run.finish(None)
        return whole, cut

    live = drive()
    assert [s.recorded for s in live] == [False, False]
    with pytest.raises(RuntimeError, match="not recorded"):
        _ = live[0].response
    with pytest.raises(RuntimeError, match="already recorded"):
        live[0].record({"a": 2})
    whole, cut = drive()
    assert whole.recorded and whole.response == {"a": 1} and not whole.partial
    assert whole.seq == live[0].seq and whole.seq is not None
    assert cut.recorded and cut.response == {"a": "par"} and cut.partial
    with pytest.raises(RuntimeError, match="is recorded"):
        whole.record({"a": 1})


def test_tool_and_value_handles_record_and_replay(journal: Journal) -> None:
    """begin_tool claims a live step (record/fail); replayed, outcome() returns or raises."""
    spec = redrive.replay.ToolSpec(name="charge")

    def drive() -> tuple[redrive.replay.ToolStep, redrive.replay.ToolStep, Any]:
        with redrive.run(journal, "handle:tool", input=1) as run:
            ok = run.begin_tool(spec, {"n": 1})
            if not ok.recorded:
                assert ok.idempotency_key == f"handle:tool:{ok.seq}:charge"
                ok.record({"paid": 1})
            bad = run.begin_tool(spec, {"n": 2})
            if not bad.recorded:
                bad.fail(ValueError("declined"))
            value = run.begin_value("uuid4", "here")
            got = value.value if value.recorded else value.record("id-1")
            run.finish(None)
        return ok, bad, got

    ok, bad, got = drive()
    assert not ok.recorded and not bad.recorded and got == "id-1"
    ok, bad, got = drive()
    assert ok.recorded and ok.outcome() == {"paid": 1}
    assert bad.recorded and isinstance(bad.error, ValueError)
    with pytest.raises(ValueError, match="declined"):
        bad.outcome()
    assert got == "id-1"


def test_async_handles(journal: Journal) -> None:
    """abegin_model / abegin_tool and arecord give the same steps as the sync handles."""
    spec = redrive.replay.ToolSpec(name="send", restart_safe=True)

    async def main() -> list[Any]:
        async with redrive.run(journal, "handle:async", input=1) as run:
            model = await run.abegin_model("model:m", {"q": 1})
            reply = model.response if model.recorded else await model.arecord({"a": 1})
            tool = await run.abegin_tool(spec, {"to": "x"})
            sent = tool.outcome() if tool.recorded else await tool.arecord("sent")
            run.finish([reply, sent])
            return [reply, sent, model.recorded, tool.recorded]

    assert asyncio.run(main()) == [{"a": 1}, "sent", False, False]
    assert asyncio.run(main()) == [{"a": 1}, "sent", True, True]


def test_run_options_name_every_constructor_option() -> None:
    """RunOptions (what types run()'s keywords) lists exactly the options a Run accepts."""
    from redrive.replay import RunOptions
    from redrive.replay._config import OPTION_DEFAULTS

    assert set(RunOptions.__optional_keys__) == set(OPTION_DEFAULTS)
    assert not RunOptions.__required_keys__
