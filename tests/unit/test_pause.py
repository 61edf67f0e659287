"""Pause instead of fail: rate limits, quotas, used-up retries and budgets stop a run ``paused``.

Driven through the real OpenAI and Anthropic SDKs against a local server
(:mod:`tests.sdkserver`), on DuckDB and Postgres, sync and async: the run
stops ``paused`` with why in its record and a ``paused`` note, is listed by
``redrive runs --status paused``, shown by ``redrive show``, planned by
``redrive plan``, continued by a resume, and a queue delivery retries it
after the provider's ``Retry-After`` or parks it for a person.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import ClassVar

import anthropic
import openai
import pytest
from hypothesis import given
from hypothesis import strategies as st

import redrive
from redrive import cli
from redrive.queues import Outcome, QueueRun, RunParkedError, Verdict
from redrive.queues._verdict import no_retry
from redrive.replay import pause_of, pause_rules
from redrive.replay._toolspec import mark_retryable
from redrive.storage import Journal, MemoryJournal
from tests.sdkserver import Reply, ScriptServer, serve

CHAT = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1,
    "model": "gpt-4o",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}
    ],
    "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
}
MESSAGES = [{"role": "user", "content": "hi"}]
LIMITED = Reply(
    status=429,
    body={"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit"}},
    headers={"retry-after": "2"},
)
NO_QUOTA = Reply(
    status=429,
    body={
        "error": {
            "message": "You exceeded your current quota",
            "type": "insufficient_quota",
            "code": "insufficient_quota",
        }
    },
)


@pytest.fixture
def server() -> Iterator[ScriptServer]:
    """A local HTTP server answering with scripted replies."""
    with serve() as srv:
        yield srv


@pytest.fixture(params=["duckdb", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Callable[[], Journal], str]:
    """Opens a fresh DuckDB or Postgres journal (each call a new handle), and its CLI URL."""
    if request.param == "duckdb":
        url = str(tmp_path / "runs.duckdb")
    else:
        schema = request.getfixturevalue("pg_schema")
        base = request.getfixturevalue("pg_url")
        url = f"{base}{'&' if '?' in base else '?'}schema={schema}"
    return (lambda: redrive.open_journal(url)), url


def _ask(server: ScriptServer, face: str, journal: Journal, run_id: str) -> str:
    """One chat completion in run ``run_id`` through the wrapped SDK (sync or async face)."""
    if face == "sync":
        client = redrive.wrap(
            openai.OpenAI(api_key="sk-test", base_url=server.url + "/v1", max_retries=0)
        )
        try:
            with redrive.run(journal, run_id, input={"q": 1}) as run:
                reply = client.chat.completions.create(model="gpt-4o", messages=MESSAGES)
                return str(run.finish(reply.id))
        finally:
            client.close()

    async def go() -> str:
        client = redrive.wrap(
            openai.AsyncOpenAI(api_key="sk-test", base_url=server.url + "/v1", max_retries=0)
        )
        try:
            async with redrive.run(journal, run_id, input={"q": 1}) as run:
                reply = await client.chat.completions.create(model="gpt-4o", messages=MESSAGES)
                return str(run.finish(reply.id))
        finally:
            await client.close()

    return asyncio.run(go())


@pytest.mark.parametrize("face", ["sync", "async"])
def test_a_rate_limit_pauses_the_run_and_a_resume_continues_it(
    server: ScriptServer,
    backend: tuple[Callable[[], Journal], str],
    face: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A 429 (after the client's own retries) stops the run paused, not failed: its record
    says why, `runs --status paused` lists it, `show` and `plan` show it, and the resume
    (once the provider answers) finishes it with the reason cleared."""
    reopen, url = backend
    journal = reopen()
    server.add(LIMITED, Reply(body=CHAT))
    with pytest.raises(openai.RateLimitError):
        _ask(server, face, journal, "r")
    record = journal.get_run("r")
    assert record is not None and record.status == "paused"
    assert record.error is not None and record.error.startswith("paused (rate_limit): ")
    pause = redrive.paused_reason(journal, "r")
    assert pause is not None and (pause.kind, pause.retry, pause.retry_after) == (
        "rate_limit",
        True,
        2.0,
    )
    journal.close()  # the CLI opens it (a DuckDB file is opened by one handle at a time)
    assert cli.main(["--journal", url, "--json", "runs", "--status", "paused"]) == 0
    listed = json.loads(capsys.readouterr().out)["runs"]
    assert [r["run_id"] for r in listed] == ["r"]
    assert cli.main(["--journal", url, "show", "r"]) == 0
    assert "paused (rate_limit): RateLimitError" in capsys.readouterr().out
    journal = reopen()
    found = redrive.plan(journal, "r")
    assert found.pause == pause and found.outcome == "continues"
    assert _ask(server, face, journal, "r") == "chatcmpl-1"
    record = journal.get_run("r")
    assert record is not None and record.status == "succeeded" and not record.error
    assert len(server.requests) == 2
    journal.close()


def test_an_exhausted_quota_waits_for_a_person(server: ScriptServer) -> None:
    """OpenAI's insufficient_quota pauses the run for a person: recover leaves it alone and
    says why; a queue delivery is not retried (a RunParkedError naming redrive resume)."""
    journal = MemoryJournal()
    server.add(NO_QUOTA)
    carrier = Carrier()
    client = redrive.wrap(
        openai.OpenAI(api_key="sk-test", base_url=server.url + "/v1", max_retries=0)
    )
    with (
        pytest.raises(RunParkedError) as info,
        QueueRun(journal, "q", carrier=carrier, input={"q": 1}) as run,
    ):
        run.finish(client.chat.completions.create(model="gpt-4o", messages=MESSAGES).id)
    client.close()
    (verdict,) = carrier.verdicts
    assert verdict.outcome is Outcome.PAUSED and not verdict.retry
    assert "redrive resume 'q'" in str(info.value) and info.value.outcome == "paused"
    pause = redrive.paused_reason(journal, "q")
    assert pause is not None and (pause.kind, pause.retry) == ("quota", False)
    (left,) = redrive.recover_runs(journal, stale=0).results
    assert left.outcome == "left" and "waiting does not clear it" in left.message


class Carrier:
    """A queue carrier that records its verdicts (retries become ``Retry``)."""

    class Retry(Exception):
        """The queue would deliver the job again later."""

    def __init__(self) -> None:
        self.verdicts: list[Verdict] = []

    def carry(self, verdict: Verdict) -> BaseException | None:
        self.verdicts.append(verdict)
        return self.Retry(verdict.reason) if verdict.retry else no_retry(verdict)


def test_a_queue_retries_a_rate_limited_run_after_its_retry_after(server: ScriptServer) -> None:
    """A rate-limited delivery is retried after the provider's Retry-After; the retry
    finishes the run."""
    journal = MemoryJournal()
    server.add(LIMITED, Reply(body=CHAT))
    carrier = Carrier()

    def deliver() -> str:
        client = redrive.wrap(
            openai.OpenAI(api_key="sk-test", base_url=server.url + "/v1", max_retries=0)
        )
        with QueueRun(journal, "j", carrier=carrier, input={"q": 1}) as run:
            return str(
                run.finish(client.chat.completions.create(model="gpt-4o", messages=MESSAGES).id)
            )

    with pytest.raises(Carrier.Retry):
        deliver()
    assert [(v.outcome, v.delay) for v in carrier.verdicts] == [(Outcome.PAUSED, 2.0)]
    assert deliver() == "chatcmpl-1"


class AgentRunError(Exception):
    """A framework's own error around the SDK's (as agent frameworks raise ``from`` it)."""


def test_an_anthropic_rate_limit_under_a_framework_error_pauses() -> None:
    """The pause is read from the whole tree under the error: a framework's error raised
    from Anthropic's RateLimitError pauses the run as a rate limit."""
    journal = MemoryJournal()
    with serve() as srv:
        srv.add(
            Reply(
                status=429,
                body={"type": "error", "error": {"type": "rate_limit_error", "message": "slow"}},
                headers={"retry-after": "5"},
            )
        )
        client = redrive.wrap(
            anthropic.Anthropic(api_key="sk-ant-test", base_url=srv.url, max_retries=0)
        )
        with pytest.raises(AgentRunError), redrive.run(journal, "a"):
            try:
                client.messages.create(model="claude-test-model", max_tokens=5, messages=MESSAGES)
            except anthropic.RateLimitError as exc:
                raise AgentRunError("the agent run failed") from exc
        client.close()
    pause = redrive.paused_reason(journal, "a")
    assert pause is not None and (pause.kind, pause.retry_after) == ("rate_limit", 5.0)
    assert pause.error_type == "RateLimitError"


class BudgetExceeded(Exception):
    """A budget the user set was reached."""


def test_the_pause_table_is_one_table_a_row_can_be_added_to() -> None:
    """pause_on adds a row (a user's spending cap pauses as its kind, for a person); PauseRun
    pauses with its own reason; a redrive error and a permanent error are no pause; the
    table keeps 'requested' first and 'retries_exhausted' last."""
    rule = redrive.pause_on(BudgetExceeded, kind="spend_cap")
    assert redrive.pause_on(BudgetExceeded, kind="spend_cap") == rule  # added once
    kinds = [r.kind for r in pause_rules()]
    assert kinds[0] == "requested" and kinds[-1] == "retries_exhausted"
    assert kinds.count("spend_cap") == 1
    assert "budget" in kinds  # redrive's own run budgets (max_tokens / max_cost)
    journal = MemoryJournal()
    with pytest.raises(BudgetExceeded), redrive.run(journal, "b"):
        raise BudgetExceeded("max_cost 0.50 USD reached at 0.51 USD")
    pause = redrive.paused_reason(journal, "b")
    assert pause is not None and (pause.kind, pause.retry) == ("spend_cap", False)
    assert journal.get_run("b").status == "paused"  # type: ignore[union-attr]
    with pytest.raises(redrive.PauseRun), redrive.run(journal, "p"):
        raise redrive.PauseRun("waiting for the nightly batch", retry=True, retry_after=60)
    pause = redrive.paused_reason(journal, "p")
    assert pause is not None and (pause.kind, pause.retry_after) == ("requested", 60.0)
    assert pause_of(redrive.DivergenceError("drift", run_id="x", seq=1)) is None
    assert pause_of(ValueError("a bug")) is None
    assert pause_of(TimeoutError("slow"), (TimeoutError,)) is not None
    with pytest.raises(ValueError), redrive.run(journal, "f"):
        raise ValueError("a bug")
    assert journal.get_run("f").status == "failed"  # type: ignore[union-attr]
    with pytest.raises(TypeError):
        redrive.pause_on(kind="spend_cap")


def test_a_paused_run_is_continued_by_recover_and_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A durable run paused on a rate limit: `recover` leaves it while its Retry-After
    runs, then drives it; `redrive resume RUN` continues one paused run by name."""
    from tests import plan_app

    monkeypatch.setenv("PLAN_APP_LOG", str(tmp_path / "effects.log"))
    limited = tmp_path / "limited"
    limited.touch()
    monkeypatch.setenv("PLAN_APP_LIMITED", str(limited))
    path = str(tmp_path / "runs.duckdb")
    journal = redrive.open_journal(path)
    for name in ("x", "y"):
        with pytest.raises(plan_app.RateLimited):
            plan_app.handle.redrive_recover(
                journal, f"plan:{name}", [], {"ops": ["safe", "limited"], "name": name}, {}
            )
    assert {r.run_id for r in journal.runs(status="paused")} == {"plan:x", "plan:y"}
    limited.unlink()
    journal.close()
    assert cli.main(["--journal", path, "resume", "plan:x"]) == 0
    assert "recovered" in capsys.readouterr().out
    assert cli.main(["--journal", path, "--json", "recover", "--stale", "0"]) == 0
    results = json.loads(capsys.readouterr().out)["results"]
    assert [(r["run_id"], r["state"], r["outcome"]) for r in results] == [
        ("plan:y", "paused", "recovered")
    ]
    journal = redrive.open_journal(path)
    assert {r.status for r in journal.runs()} == {"succeeded"}
    assert plan_app.effects() == ["safe 0", "safe 0"]  # each run's tool ran once
    journal.close()


def test_procrastinate_retries_a_pause_that_waiting_clears_within_its_attempts() -> None:
    """procrastinate's strategy retries a paused delivery at its delay, counted against
    max_attempts (the run stays paused when the queue gives up: recover continues it)."""
    import datetime

    from redrive.queues.procrastinate import RetryLater, RunRetryStrategy

    class Job:
        attempts = 0

    verdict = Verdict(outcome=Outcome.PAUSED, run_id="r", delay=30.0, reason="rate limit")
    strategy = RunRetryStrategy(max_attempts=2)
    job = Job()
    before = datetime.datetime.now(datetime.UTC)
    decision = strategy.get_retry_decision(exception=RetryLater(verdict), job=job)  # type: ignore[arg-type]
    assert decision is not None and decision.retry_at is not None
    assert decision.retry_at >= before + datetime.timedelta(seconds=30)
    job.attempts = 2
    assert strategy.get_retry_decision(exception=RetryLater(verdict), job=job) is None  # type: ignore[arg-type]


@pytest.mark.parametrize("declared", [False, True], ids=["recorded", "retryable"])
def test_a_tool_rate_limited_pauses_only_when_a_resume_runs_it_again(
    server: ScriptServer, backend: tuple[Callable[[], Journal], str], declared: bool
) -> None:
    """A tool body refused by a rate limit (the provider's SDK called inside the tool):
    its error is the tool's recorded outcome, which a resume replays, so waiting clears
    nothing: the run fails, not a pause that every resume (and recover, after each
    Retry-After) re-enters forever. With retryable=(RateLimitError,) the step stays open:
    the run pauses and the resume runs the body again and finishes."""
    reopen, _url = backend
    server.add(LIMITED, Reply(body=CHAT))
    sdk = openai.OpenAI(api_key="sk-test", base_url=server.url + "/v1", max_retries=0)
    retryable = (openai.RateLimitError,) if declared else ()

    @redrive.tool(read_only=True, retryable=retryable)
    def summarize(text: str) -> str:
        messages = [{"role": "user", "content": text}]
        return str(sdk.chat.completions.create(model="gpt-4o", messages=messages).id)  # type: ignore[arg-type]

    def attempt() -> str:
        journal = reopen()
        try:
            with redrive.run(journal, "t") as run:
                return str(run.finish(summarize("x")))
        finally:
            journal.close()

    with pytest.raises(openai.RateLimitError):
        attempt()
    journal = reopen()
    record = journal.get_run("t")
    pause = redrive.paused_reason(journal, "t")
    journal.close()
    assert record is not None
    if not declared:
        assert (record.status, pause) == ("failed", None)
        assert record.error is not None and record.error.startswith("RateLimitError")
    else:
        assert record.status == "paused" and pause is not None and pause.kind == "rate_limit"
        assert attempt() == "chatcmpl-1"
        assert len(server.requests) == 2
    sdk.close()


class _Limited(Exception):
    status_code = 429
    headers: ClassVar[dict[str, str]] = {"retry-after": "3"}


class _Quota(Exception):
    status_code = 429
    code = "insufficient_quota"


@given(
    error=st.sampled_from([_Limited, _Quota]),
    wrappers=st.integers(0, 3),
    retryable=st.booleans(),
)
def test_a_tool_recorded_error_is_never_a_pause_unless_retryable(
    error: type[Exception], wrappers: int, retryable: bool
) -> None:
    """Whatever pausing error a tool body raised, under any chain of framework wrappers: as
    the tool's recorded (not retryable) outcome it pauses nothing; marked retryable it does."""
    assert pause_of(error("alone")) is not None
    inner = error("from a tool body")
    mark_retryable(inner, retryable)
    top: BaseException = inner
    for n in range(wrappers):
        outer = RuntimeError(f"framework layer {n}")
        outer.__cause__ = top
        top = outer
    assert (pause_of(top) is not None) is retryable
