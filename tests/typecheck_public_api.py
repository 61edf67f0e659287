"""Type-check-only use of the public API (run by mypy in tests/unit/test_static.py).

Not collected by pytest (no ``test_`` prefix); it must type-check under
``mypy --strict`` so the public surface stays typed for users.
"""

from __future__ import annotations

import asyncio
import datetime
import uuid
from collections.abc import Coroutine
from typing import Any, assert_type

import anthropic
import openai

import redrive
from redrive.errors import DivergenceReason, RunBusyReason
from redrive.recorders.cassettes import CassetteLimits
from redrive.replay import resolve_step
from redrive.storage import PruneResult, RunRecord, prune_runs


@redrive.tool(read_only=True)
def lookup(customer: str) -> dict[str, str]:
    return {"customer": customer}


@redrive.tool(restart_safe=True, recover=lambda args, key: redrive.Recovery.unknown("?"))
def send(to: str, idempotency_key: str | None = None) -> str:
    return to


@redrive.model
def ask(prompt: str) -> str:
    return prompt


@redrive.model(name="model:summarize", encode=str, decode=str)
async def summarize(text: str, *, limit: int = 100) -> str:
    return text[:limit]


@redrive.tool
async def fetch_page(url: str) -> bytes:
    return url.encode()


@redrive.durable(":memory:", run_id="ticket:{ticket_id}")
def handle_ticket(ticket_id: int, message: str) -> dict[str, str]:
    return {"reply": message}


@redrive.durable(":memory:", run_id=lambda ticket_id: f"aticket:{ticket_id}")
async def ahandle_ticket(ticket_id: int) -> list[int]:
    return [ticket_id]


async def decorated_signatures_flow() -> None:
    """The decorators keep the wrapped signatures and return types (sync and async)."""
    assert_type(ask("p"), str)
    assert_type(lookup("c"), dict[str, str])
    assert_type(send("a", idempotency_key="k"), str)
    assert_type(await summarize("t", limit=3), str)
    assert_type(await fetch_page("u"), bytes)
    assert_type(handle_ticket(1, "hi"), dict[str, str])
    assert_type(await ahandle_ticket(1), list[int])
    pending: Coroutine[Any, Any, list[int]] = ahandle_ticket(2)
    pending.close()


def clients_keep_their_types() -> None:
    """redrive.wrap returns the client's own type, sync and async."""
    assert_type(redrive.wrap(openai.OpenAI(api_key="k")), openai.OpenAI)
    assert_type(redrive.wrap(openai.AsyncOpenAI(api_key="k")), openai.AsyncOpenAI)
    assert_type(redrive.wrap(anthropic.Anthropic(api_key="k")), anthropic.Anthropic)
    assert_type(
        redrive.wrap(anthropic.AsyncAnthropic(api_key="k"), provider="claude"),
        anthropic.AsyncAnthropic,
    )


def library_tools(journal: redrive.Journal) -> None:
    """fork, diff_runs and check_runs return typed records."""
    forked: RunRecord = redrive.fork(journal, "job:1", 3, "job:1-b")
    assert forked.run_id == "job:1-b"
    diff = redrive.diff_runs("job:1", "job:1-b", journal=journal)
    if diff is not None:
        what: str = diff.what
        leaves: list[tuple[str, Any, Any]] = diff.diff
        print(diff.index, what, leaves)
    report: redrive.CheckReport = redrive.check_runs(["fixtures/runs"], fail_fast=True)
    for result in report.failed:
        seq: int | None = result.seq
        print(result.outcome, result.message, seq)
    print(report.summary(), len(report.passed))


def error_fields(journal: redrive.Journal) -> None:
    """Typed code reads the errors' fields."""
    try:
        with redrive.run(journal, "job:1", live=False, live_tools=["send_email"]):
            pass
    except redrive.DivergenceError as err:
        assert_type(err.caller, str | None)
        assert_type(err.seq, int | None)
        assert_type(err.run_id, str | None)
        assert_type(err.reason, DivergenceReason)
        assert_type(err.diff, list[tuple[str, Any, Any]] | None)
        assert_type(err.found_name, str | None)
        print(err.expected, err.found, err.context, err.fields, err.to_fields())
        if err.reason is DivergenceReason.UNUSED_STEPS:
            return
    except redrive.RunInputMismatchError as err:
        print(err.expected, err.found, err.diff)
    except redrive.SideEffectRetryBlockedError as err:
        assert_type(err.tool, str | None)
        assert_type(err.attempts, int | None)
    except redrive.RunBusyError as err:
        assert_type(err.reason, RunBusyReason)
        assert_type(err.owner, str | None)
        assert_type(err.where, str | None)
    except redrive.RunEndedError as err:
        assert_type(err.status, str | None)
        assert_type(err.step, str | None)
        assert_type(err.thread, str | None)
    except redrive.JournalCorruptError as err:
        assert_type(err.last_good_seq, int | None)
    except redrive.ReplayMissError as err:
        assert_type(err.closest, list[str] | None)


def main() -> None:
    journal: redrive.Journal = redrive.open_journal(":memory:")
    policy = redrive.ReplayPolicy(tool="strict", model="warn", ignore=("$..request_id",))
    with redrive.run(journal, "job:1", input={"q": 1}, replay=policy, lease=30.0) as run:
        when: datetime.datetime = redrive.now()
        ident: uuid.UUID = redrive.uuid4()
        share: float = redrive.random()
        key: str | None = redrive.idempotency_key()
        token: int | None = redrive.fencing_token()
        assert token is None  # outside a tool body
        run.finish([lookup("c"), send("a"), ask("p"), str(when), str(ident), share, key])
    status: str = run.status
    counts: int = run.replayed_steps + run.live_steps
    assert status and counts >= 0
    try:
        with redrive.run(journal, "job:1", live=False):
            pass
    except redrive.DivergenceError as err:
        print(err.run_id, err.seq)
    except redrive.ReplayError:
        raise


def operate(journal: redrive.Journal) -> None:
    """The library calls behind the operator commands."""
    pruned: PruneResult = prune_runs(journal, older_than=30 * 86400.0, dry_run=True)
    gone: tuple[RunRecord, ...] = pruned.deleted
    deleted: bool = journal.delete_run("job:1", expected_seq=3)
    step = resolve_step(journal, "job:1", 3, state="not_done", by="ops", reason="checked")
    limits = CassetteLimits(max_aliases=100, max_body_bytes=1 << 20)
    print(gone, deleted, step.name, limits.max_depth)


def plan_and_pause(journal: redrive.Journal) -> None:
    """The resume plan and the pause API, as operators and budget code use them."""
    found: redrive.ResumePlan = redrive.plan(journal, "job:1", replay=False)
    first: redrive.PlanStep | None = found.first_decision
    pause: redrive.Pause | None = redrive.paused_reason(journal, "job:1")
    rule = redrive.pause_on(ValueError, kind="budget")
    print(found.outcome, first, pause, rule.kind, found.to_dict())
    raise redrive.PauseRun("waiting for the quota", retry=True, retry_after=60.0)


async def aplan(journal: redrive.Journal) -> str:
    found = await redrive.aplan(journal, "job:1")
    return found.summary()


async def amain() -> None:
    async with redrive.run(":memory:", "job:2") as run:
        run.finish(1)


if __name__ == "__main__":
    main()
    asyncio.run(amain())
