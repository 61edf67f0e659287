"""What a queue does with a job after one delivery of its run (issue 27 item 8, redrive.queues).

The kind behind the report (a killed worker's run left blocked while Celery acknowledged
the job as failed, so nothing retried it or showed it to anyone): a delivery whose run is
still resumable must never be dropped as an ordinary failure. It is retried (another worker
holds it; a transient stop) or parked with an error naming the run and the command a person
runs; only a run that ended is given up.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import redrive
from redrive.errors import (
    DivergenceError,
    JournalCorruptError,
    JournalWriteError,
    LeaseLostError,
    ReplayMissError,
    RetryLimitExceededError,
    RunBusyError,
    RunInputMismatchError,
    SideEffectRetryBlockedError,
    TerminalRunError,
)
from redrive.queues import QUEUE_LEASE, Outcome, QueueRun, RunParkedError, Verdict, judge
from redrive.storage import MemoryJournal, RunRecord

ERRORS: list[type[BaseException]] = [
    RunBusyError,
    LeaseLostError,
    SideEffectRetryBlockedError,
    RetryLimitExceededError,
    DivergenceError,
    JournalWriteError,
    TerminalRunError,
    RunInputMismatchError,
    JournalCorruptError,
    ReplayMissError,
    ConnectionError,
    ValueError,
    TimeoutError,
]
#: errors after which only a person can move the run on
PERSON = (
    SideEffectRetryBlockedError,
    DivergenceError,
    RunInputMismatchError,
    JournalCorruptError,
    ReplayMissError,
)


class Index:
    """A journal's run index holding one run (what :func:`judge` reads)."""

    def __init__(self, record: RunRecord | None) -> None:
        self.record = record

    def get_run(self, run_id: str) -> RunRecord | None:
        return self.record


def _error(cls: type[BaseException]) -> BaseException:
    if issubclass(cls, redrive.ReplayError):
        return cls("stopped", run_id="r", seq=3)
    return cls("stopped")


@given(
    cls=st.sampled_from(ERRORS),
    status=st.sampled_from(
        ["running", "suspended", "paused", "succeeded", "failed", "cancelled", None]
    ),
    leased_for=st.one_of(st.none(), st.floats(0, 60)),
)
def test_a_resumable_run_is_never_dropped_as_a_plain_failure(
    cls: type[BaseException], status: str | None, leased_for: float | None
) -> None:
    """For every error a delivery can end with and every state it leaves the run in: a run that
    is still resumable is retried or parked, never given up; a busy run is retried no sooner
    than its lease lapses; only a run that ended (or never started) fails for good."""
    record = None
    if status is not None:
        expires = None if leased_for is None else time.time() + leased_for
        owner = None if leased_for is None else "w:1"
        record = RunRecord(run_id="r", status=status, lease_owner=owner, lease_expires=expires)
    before = time.time()
    verdict = judge("r", _error(cls), journal=Index(record), lease=3.0)  # type: ignore[arg-type]
    assert verdict.outcome not in (Outcome.DONE, Outcome.SUSPENDED)
    assert verdict.retry == (verdict.delay is not None)
    if issubclass(cls, RunBusyError):
        assert verdict.outcome is Outcome.BUSY
        if leased_for is not None and cls is not LeaseLostError and status is not None:
            assert verdict.delay is not None and before + verdict.delay >= before + leased_for
    elif status == "paused" and cls not in (TerminalRunError, JournalWriteError):
        # a paused run waits (retried later) or a person settles its cause: never dropped
        assert verdict.outcome is Outcome.PAUSED and verdict.reason
    elif issubclass(cls, PERSON):
        assert verdict.outcome is Outcome.PARKED
    elif cls is TerminalRunError:
        assert verdict.outcome is Outcome.FAILED
    elif cls is JournalWriteError or status == "running":
        assert verdict.outcome is Outcome.TRANSIENT
    else:  # an ordinary error that ended the run (or came before it existed)
        assert verdict.outcome is Outcome.FAILED
    if verdict.outcome is Outcome.FAILED:
        assert status != "running" or cls is TerminalRunError


def test_a_parked_error_names_the_run_and_what_a_person_runs() -> None:
    """The error a parked job fails with: the run, the seq, the cause, `redrive resolve` first
    among its next steps and `redrive runs --status blocked` last."""
    from redrive.queues import parked_error

    cause = SideEffectRetryBlockedError("open_ticket was in flight", run_id="support:7", seq=4)
    error = parked_error("support:7", cause)
    assert isinstance(error, RunParkedError) and isinstance(error, redrive.ReplayError)
    assert error.run_id == "support:7" and error.seq == 4
    assert error.cause_type == "SideEffectRetryBlockedError"
    assert "'support:7'" in str(error) and "redrive resolve" in str(error)
    assert "redrive runs --status blocked" in error.next_steps[-1].text


class Recorder:
    """A carrier that records the verdicts it is handed; retries become ``Retry``."""

    class Retry(Exception):
        pass

    def __init__(self) -> None:
        self.verdicts: list[Verdict] = []

    def carry(self, verdict: Verdict) -> BaseException | None:
        self.verdicts.append(verdict)
        return self.Retry(verdict.reason) if verdict.retry else None


def _deliver(face: str, journal: Any, carrier: Recorder, body: Any, **options: Any) -> Any:
    queued = QueueRun(journal, "support:1", carrier=carrier, input={"job": 1}, **options)
    if face == "sync":
        with queued as run:
            return run.finish(body())

    async def go() -> Any:
        async with queued as run:
            return run.finish(body())

    return asyncio.run(go())


@pytest.mark.parametrize("face", ["sync", "async"])
def test_each_face_carries_the_verdict_out(face: str) -> None:
    """Sync and async: a transient stop pauses the run and is handed to the carrier and
    retried after the back-off; the retry finishes the run (done, the carrier not asked); a
    finished run replays (done); a non-retryable error ends the run and reaches the queue as
    it is (failed)."""
    journal = MemoryJournal()
    carrier = Recorder()

    def outage() -> str:
        raise ConnectionError("model outage")

    with pytest.raises(Recorder.Retry):
        _deliver(face, journal, carrier, outage, retryable=(ConnectionError,))
    assert [v.outcome for v in carrier.verdicts] == [Outcome.PAUSED]
    assert carrier.verdicts[0].retry and carrier.verdicts[0].delay == 1.0
    assert journal.get_run("support:1").status == "paused"  # type: ignore[union-attr]
    assert isinstance(carrier.verdicts[0].error, ConnectionError)
    assert _deliver(face, journal, carrier, lambda: "answered") == "answered"
    assert _deliver(face, journal, carrier, lambda: "answered") == "answered"  # replayed
    assert len(carrier.verdicts) == 1

    def bug() -> str:
        raise KeyError("a bug")

    other = MemoryJournal()
    with pytest.raises(KeyError):
        _deliver(face, other, carrier, bug)
    assert carrier.verdicts[-1].outcome is Outcome.FAILED
    assert other.get_run("support:1").status == "failed"  # type: ignore[union-attr]


@pytest.mark.parametrize("face", ["sync", "async"])
def test_a_delivery_of_a_run_open_elsewhere_is_retried_and_leases_by_default(face: str) -> None:
    """A second delivery while the first holds the run is busy (retried); the adapter's run
    holds a lease on a journal that takes none by default (memory, DuckDB)."""
    journal = MemoryJournal()
    carrier = Recorder()
    with redrive.run(journal, "support:1", input={"job": 1}, lease=QUEUE_LEASE) as first:
        with pytest.raises(Recorder.Retry):
            _deliver(face, journal, carrier, lambda: "never")
        first.finish("first")
    assert [v.outcome for v in carrier.verdicts] == [Outcome.BUSY]
    queued = QueueRun(journal, "other", carrier=carrier)
    assert queued.run.lease == QUEUE_LEASE


_WITHOUT = """
import importlib.abc, sys

class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {"celery", "kombu", "procrastinate"}:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Blocker())
import redrive.queues
for module, extra in (("celery", "celery"), ("procrastinate", "procrastinate")):
    try:
        __import__(f"redrive.queues.{module}")
    except ImportError as err:
        assert f"pip install 'redrive[{extra}]'" in str(err), err
    else:
        raise AssertionError(module)
print("ok")
"""


def test_the_adapters_name_their_extra_when_the_queue_is_not_installed() -> None:
    """`redrive.queues` imports with neither queue installed; each adapter says what to install."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT],
        cwd=root,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.stdout.strip() == "ok", done.stderr


def test_the_celery_log_line_says_the_capped_countdown(caplog: pytest.LogCaptureFixture) -> None:
    """Celery caps a retry's countdown at half the broker's visibility timeout; the worker's
    log line and the verdict say that countdown, not the back-off before the cap."""
    pytest.importorskip("celery")
    from types import SimpleNamespace

    from redrive.queues.celery import CeleryCarrier

    asked: list[float] = []

    def retry(countdown: float, exc: Any, throw: bool, **extra: Any) -> Exception:
        asked.append(countdown)
        return RuntimeError("celery Retry")

    app = SimpleNamespace(conf=SimpleNamespace(broker_transport_options={"visibility_timeout": 4}))
    task: Any = SimpleNamespace(app=app, request=SimpleNamespace(retries=0), retry=retry)
    queued = QueueRun(
        MemoryJournal(),
        "support:1",
        carrier=CeleryCarrier(task),
        backoff=30.0,
        retryable=(ConnectionError,),
    )
    logged = caplog.at_level("WARNING", logger="redrive.queues")
    with logged, pytest.raises(RuntimeError), queued:
        raise ConnectionError("model outage")
    assert asked == [2.0]
    assert queued.verdict is not None and queued.verdict.delay == 2.0
    line = [r.getMessage() for r in caplog.records if r.name == "redrive.queues"][-1]
    assert "retry in 2.0 s" in line and "30.0" not in line
