"""The Run: starts or resumes a run, replays recorded steps, records live ones.

A Run is a thin facade over the parts it holds (each one thing; imports go one
way, from the top of this list down; a test fails on a circle):

- :class:`~._block.RunBlock`: the run's block: open (start or resume, lease, one
  live block per process), notes, end (succeeded, failed, suspended, cancelled);
- :class:`~._tools.ToolSteps`, :class:`~._models.ModelSteps`,
  :class:`~._models.ValueSteps`: the steps recorders open (:mod:`._handle`);
- :class:`~._matcher.Matcher`: a step against the record, over the
  :class:`~._cursor.Cursor`; the step engine (:mod:`._engine`, pure) decides;
- :class:`~._appender.Appender` (group commit, a lost append race), the
  :class:`~._writer.JournalWriter` and the :class:`~._lease.LeaseKeeper`;
- :class:`~._operations.OperationLedger` (logical operations and their keys)
  and :class:`~._flows.FlowTracker` (who asked: concurrent callers);
- :class:`~._state.RunState`: what this execution knows, shared by the parts,
  over the checked options (:class:`~._config.RunConfig`).

One implementation serves the sync and the async face: the async face runs
the same blocking sections off the event loop (:mod:`._faces`).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar, Unpack

from .._stored import rebuild
from ..frames import Frame, canonical
from ..storage import Journal
from ._appender import Appender
from ._block import INTERRUPTIONS, RunBlock, Suspended
from ._config import RunConfig, RunOptions
from ._context import close_here, opener
from ._faces import adrive, drive, off_loop
from ._flows import FlowTracker
from ._handle import ModelStep, StepSource, ToolStep, ValueStep
from ._lease import LeaseKeeper
from ._matcher import Matcher
from ._models import ModelSteps, ValueSteps
from ._operations import OperationLedger
from ._policy import scrubber
from ._redirect import redirected
from ._state import RunState
from ._tools import ToolSteps
from ._toolspec import ToolSpec
from ._usage import RunUsage
from ._writer import JournalWriter

__all__ = [
    "INTERRUPTIONS",
    "Run",
    "RunOptions",
    "Suspended",
    "run",
]

T = TypeVar("T")


def _plain(value: Any) -> Any:
    """A response as it is (the default encode and decode of a model step)."""
    return value


class Run:
    """One execution (first or resumed) of a run; use through :func:`run`.

    Args:
        journal: where its frames live.
        run_id: the run's id.
        **options: the options of :func:`run` (checked here: ``TypeError`` or
            ``ValueError`` before anything is written).

    Attributes:
        run_id: the run's id.
        journal: where its frames live.
        status: the run's status (a :class:`~redrive.storage.RunStatus` value string).
        replayed_steps: steps answered from the journal so far.
        live_steps: steps executed live (and recorded) so far.
        resumed: True when the run already existed in the journal.
        output: the recorded output of a finished run, or what :meth:`finish` set.
    """

    def __init__(self, journal: Journal, run_id: str, **options: Unpack[RunOptions]) -> None:
        config = RunConfig.of(journal, run_id, options)
        self._state = state = RunState(config)
        lease = LeaseKeeper(journal, run_id, config.lease, config.on_busy, config.busy_timeout)
        writer = JournalWriter(journal, run_id, lease, scrubber(config.redact, config.keep))
        self._flows = flows = FlowTracker()
        matcher = Matcher(state, writer, lease, flows)
        appender = Appender(state, writer, lease, flows)
        self._block = RunBlock(self, state, writer, lease, flows, matcher, appender)
        self._models = ModelSteps(state, writer, flows, matcher, appender)
        self._values = ValueSteps(state, writer, flows, matcher)
        ledger = OperationLedger()
        self._tools = ToolSteps(state, writer, lease, flows, ledger, matcher, appender)

    def __repr__(self) -> str:
        state = self._state
        return (
            f"<redrive.Run {self.run_id!r} status={state.status} "
            f"replayed={state.replayed_steps} live={state.live_steps}>"
        )

    # -- what the run is ---------------------------------------------------------

    @property
    def run_id(self) -> str:
        """The run's id."""
        return self._state.config.run_id

    @property
    def journal(self) -> Journal:
        """The journal the run's frames live in."""
        return self._state.config.journal

    @property
    def live(self) -> bool:
        """False for a replay-only run (``live=False``): any step not recorded raises."""
        return self._state.config.live

    @property
    def lease(self) -> float | None:
        """The run lease this execution takes, in seconds (``lease="auto"`` resolved), or None."""
        return self._state.config.lease

    @property
    def entrypoint(self) -> str | None:
        """``"module:qualname"`` of the function driving the run, when known."""
        return self._state.config.entrypoint

    @property
    def status(self) -> str:
        """The run's status (a :class:`~redrive.storage.RunStatus` value string)."""
        return self._state.status

    @property
    def resumed(self) -> bool:
        """True when the run already existed in the journal."""
        return self._state.resumed

    @property
    def finished(self) -> bool:
        """True when the run had already succeeded before this execution."""
        return self._state.finished_record is not None

    @property
    def replayed_steps(self) -> int:
        """Steps answered from the journal so far."""
        return self._state.replayed_steps

    @property
    def live_steps(self) -> int:
        """Steps executed live (and recorded) so far."""
        return self._state.live_steps

    @property
    def usage(self) -> RunUsage:
        """Model usage: spent by live calls (each once, every execution), saved by replay."""
        return self._state.spend.usage()

    @property
    def reasked(self) -> list[dict[str, Any]]:
        """The ``reasked`` notes this execution journaled (model steps re-asked live)."""
        return self._state.reasked

    @property
    def output(self) -> Any:
        """The run's output: recorded (finished run) or set by :meth:`finish`."""
        state = self._state
        if state.finished_record is not None and not state.output_set:
            return rebuild(state.finished_record.output_value(), where="$.output")
        return state.output

    # -- the user's part -----------------------------------------------------------

    def finish(self, output: Any) -> Any:
        """Set the run's output, recorded in ``run_end`` when the block exits cleanly.

        Returns ``output`` (for a finished run replayed, the recorded output).

        Raises:
            TypeError: ``output`` cannot be encoded canonically.
        """
        canonical(output, "output")
        state = self._state
        if state.finished_record is not None:
            return rebuild(state.finished_record.output_value(), where="$.output")
        state.output = output
        state.output_set = True
        return output

    def recorded_output(self) -> Any:
        """Return a finished run's recorded output without re-driving its loop.

        Exiting the block then skips the check that every recorded step was
        asked for (``@redrive.durable`` uses this when called again after success).

        Raises:
            RuntimeError: the run has not finished (there is no recorded output).
        """
        state = self._state
        if state.finished_record is None:
            raise RuntimeError(
                f"run {self.run_id!r} has not succeeded yet (status {state.status}): there is "
                "no recorded output; run the loop"
            )
        state.short_circuited = True
        return rebuild(state.finished_record.output_value(), where="$.output")

    def cancel(self, reason: str, *, by: str = "run.cancel") -> None:
        """End the run ``cancelled`` at once, on purpose, naming who and why.

        See :meth:`RunBlock.cancel <redrive.replay._block.RunBlock.cancel>`:
        the cancel is committed before this returns; every later step of this
        block is refused, and a redelivery raises ``TerminalRunError``. In
        async code use :meth:`acancel`.

        Raises:
            ValueError: ``reason`` or ``by`` is empty.
            RuntimeError: the run is not executing live.
            TerminalRunError: the run already ended.
            LeaseLostError, JournalWriteError: the write was refused.
        """
        self._block.cancel(reason, by=by)

    async def acancel(self, reason: str, *, by: str = "run.cancel") -> None:
        """The async form of :meth:`cancel`: the journal write runs off the event loop."""
        await off_loop(functools.partial(self._block.cancel, reason, by=by))

    def note(self, name: str, data: Any) -> None:
        """Journal a note (not a step; never matched on replay).

        Raises:
            RunEndedError: the run's block has ended (nothing is written).
        """
        self._block.note(name, data)

    def resume_note(self) -> str:
        """Return a plain-text note on the tool calls recorded before this execution resumed.

        For loops that rebuild their own prompt on resume: it lists the calls
        that completed (with short results), failed, or were interrupted with
        an unknown outcome (with their idempotency keys). ``""`` for a run that
        is not resumed or had no tool call.
        """
        return self._block.resume_note()

    def frames(self) -> Iterator[Frame]:
        """Yield the run's journaled frames (pending ones are flushed first)."""
        return self._block.frames()

    def _repr_html_(self) -> str:
        """The run's timeline (as ``redrive view`` draws it), for Jupyter to display.

        Returns:
            An ``<iframe srcdoc=...>`` holding the self-contained page: steps
            this execution replayed are marked ``replayed``, the others ``live``.
        """
        from ._timeline import as_iframe

        resumed_at = self._state.resumed_at if self.resumed else 0
        return as_iframe(list(self.frames()), self.run_id, replayed_before=resumed_at)

    # -- the block -------------------------------------------------------------------

    def __enter__(self) -> Run:
        block = self._block
        drive(block.open_in_process(*opener()))
        try:
            drive(block.opening())
        except BaseException:
            close_here(self)
            raise
        block.bind()
        return self

    def __exit__(self, et: Any, exc: BaseException | None, tb: Any) -> bool:
        try:
            self._block.closing(exc)
        finally:
            self._block.unbind()
            close_here(self)
        return isinstance(exc, Suspended)  # suspended: the block ends, status says why

    async def __aenter__(self) -> Run:
        block = self._block
        await block.aopen_in_process()
        try:
            await adrive(block.opening())
        except asyncio.CancelledError:
            close_here(self)
            await off_loop(block.release)  # opened, but the block will never run
            raise
        except BaseException:
            close_here(self)
            raise
        block.bind()
        return self

    async def __aexit__(self, et: Any, exc: BaseException | None, tb: Any) -> bool:
        try:
            await off_loop(self._block.closing, exc)
        finally:
            self._block.unbind()
            close_here(self)
        return isinstance(exc, Suspended)

    # -- the recorders' part (StepSource) ------------------------------------------

    @property
    def redacting(self) -> bool:
        """True when the run was given ``redact`` path patterns."""
        return bool(self._state.config.redact_paths)

    def redact(self, value: Any) -> Any:
        """Return canonical ``value`` with every ``redact`` path replaced by ``[REDACTED]``.

        Recorders apply it to what they journal besides requests (e.g. a JSON
        response body, as ``{"body": ...}``, so ``$.body...`` patterns match).
        """
        return self._block.redact(value)

    def before_next_step(self, settle: Callable[[], None]) -> None:
        """Run ``settle()`` before the next step of this thread or task begins, or at a clean end.

        See :meth:`redrive.replay._flows.FlowTracker.before_next_step`.
        """
        self._flows.before_next_step(settle)

    def begin_model(self, name: str, request: Any, *, ignore: tuple[str, ...] = ()) -> ModelStep:
        """Open a model step (see :meth:`redrive.replay._models.ModelSteps.begin`)."""
        return self._models.begin(name, request, ignore=ignore)

    async def abegin_model(
        self, name: str, request: Any, *, ignore: tuple[str, ...] = ()
    ) -> ModelStep:
        """The async form of :meth:`begin_model`: the journal work runs off the event loop."""
        return await self._models.abegin(name, request, ignore=ignore)

    def begin_tool(self, spec: ToolSpec, arguments: dict[str, Any]) -> ToolStep:
        """Open (live: claim) a tool step (see :meth:`redrive.replay._tools.ToolSteps.begin`)."""
        return self._tools.begin(spec, arguments)

    async def abegin_tool(self, spec: ToolSpec, arguments: dict[str, Any]) -> ToolStep:
        """The async form of :meth:`begin_tool`: the journal work runs off the event loop."""
        return await self._tools.abegin(spec, arguments)

    def begin_value(self, name: str, label: str, *, extra: Any = None) -> ValueStep:
        """Open a recorded value (see :meth:`redrive.replay._models.ValueSteps.begin`)."""
        return self._values.begin(name, label, extra=extra)

    def model_step(
        self,
        name: str,
        request: Any,
        call: Callable[[], T],
        *,
        encode: Callable[[T], Any] = _plain,
        decode: Callable[[Any], Any] = _plain,
    ) -> Any:
        """Run one model step: replay the recorded response, or call and record.

        Args:
            name: the step name (``"model:gpt-4o"``...).
            request: the request's arguments (canonically encodable).
            call: makes the live call and returns the response.
            encode: turns a live response into canonical plain data.
            decode: turns recorded plain data into what the caller gets.

        Returns:
            ``decode(encode(response))`` (the same shape live and replayed).
        """
        return self._models.model_step(name, request, call, encode=encode, decode=decode)

    async def amodel_step(
        self,
        name: str,
        request: Any,
        call: Callable[[], Awaitable[T]],
        *,
        encode: Callable[[T], Any] = _plain,
        decode: Callable[[Any], Any] = _plain,
    ) -> Any:
        """The async form of :meth:`model_step` (journal work off the loop, ``call`` on it)."""
        return await self._models.amodel_step(name, request, call, encode=encode, decode=decode)

    def tool_step(self, spec: ToolSpec, arguments: dict[str, Any], body: Callable[[str], T]) -> Any:
        """Run one tool step: replay its outcome, or claim it and run ``body(idempotency_key)``."""
        return self._tools.tool_step(spec, arguments, body)

    async def atool_step(
        self, spec: ToolSpec, arguments: dict[str, Any], body: Callable[[str], Awaitable[T]]
    ) -> Any:
        """The async form of :meth:`tool_step` (``body`` returns an awaitable)."""
        return await self._tools.atool_step(spec, arguments, body)

    def value_step(
        self, name: str, label: str, make: Callable[[], Any], *, extra: Any = None
    ) -> Any:
        """Return a recorded value or make and record one (one call of :meth:`begin_value`)."""
        return self._values.value_step(name, label, make, extra=extra)


def run(journal: Journal | str, run_id: str, **options: Unpack[RunOptions]) -> Run:
    """Start or resume the run ``run_id``; use as ``with`` or ``async with``.

    Args:
        journal: a journal, or a URL (opened once per process and reused:
            :func:`redrive.storage.shared_journal`).
        run_id: the caller-chosen id, e.g. ``"support:{job.id}"`` (the job's
            id, never a session's).
        input: the run's input; fingerprinted, and a resume with a different
            input raises ``RunInputMismatchError``. Omit it to skip the check.
        replay: ``"strict"`` (default), ``"lenient"`` or a :class:`ReplayPolicy`.
        on_in_flight: ``"raise"`` (default) or ``"tell_model"``.
        max_attempts: starts allowed for one in-flight step (default 3).
        lease: hold a run lease of this many seconds (renewed in the background).
            Default ``"auto"``: a lease of 30 seconds on a journal made for many
            workers (Postgres), so two workers started together on one run never
            both execute it or pay for a model call twice (the second gets
            ``RunBusyError`` with reason ``leased``, or waits under
            ``on_busy="wait"``); none on DuckDB, memory and ``.rdj`` journals.
            ``None``: no lease; on Postgres, two workers may then both pay for
            a model call (side effects still run once: claims are atomic).
        on_busy: ``"raise"`` (``RunBusyError``) or ``"wait"`` (up to ``busy_timeout`` s).
        busy_timeout: seconds to wait for another worker under ``on_busy="wait"`` (default
            30, or the run's lease plus its takeover grace and a second when it takes
            one: long enough to take over from a worker that died holding it).
        create: start the run when missing (default True; False raises UnknownRunError).
        live: False replays only: any step not in the journal raises ReplayMissError.
        redact: path patterns of argument fields never written to the journal.
        keep: path patterns (optionally ``"<step kind>:$.path"``, kinds ``run``,
            ``model``, ``tool``, ``value``, ``note``) the default secret rules
            leave verbatim (``redact`` still applies); see docs/secrets.md.
        model_commit: how a live model step's frames are written: ``"write"``
            (default: appended at once without an fsync of their own; they survive
            the worker being killed, and the next durable write covers a machine
            crash), ``"group"`` (held in memory until the next durable write: a
            killed worker pays for the call again) or ``"each"`` (fsynced at once).
        retryable: exception types after which the run stays resumable.
        entrypoint: ``"module:qualname"`` of the function driving the run
            (``@redrive.durable`` sets it; ``redrive check`` imports it).
        app_version: the application's version, recorded in the run's fingerprint
            (default: ``$REDRIVE_APP_VERSION``, else the git commit of the
            entrypoint's checkout, else its package's version).
        live_tools: ``True`` (every tool) or a list of tool names whose bodies
            run again where the journal has their outcome, model steps still
            replayed: for tests whose tools write to the test's own resources,
            and for a breakpoint in a tool while replaying an incident. Each
            result (or exception) is checked against the record: a difference
            raises ``DivergenceError`` naming the path (``$.result...``); nothing
            is written for such a step. Default False.

    Returns:
        A :class:`Run`; entering it starts or resumes the run.

    Raises:
        TypeError: (at once) an unknown option, or an option of the wrong type;
            nothing is written.
        ValueError: (at once) ``run_id`` breaks the run-id rule (empty, NUL, a
            lone surrogate, over 1,024 UTF-8 bytes; see ``redrive._runid``), or
            an option has a value outside its choices; nothing is written.

    Raises (on entering):
        RunInputMismatchError, TerminalRunError, UnknownRunError, RunBusyError,
        JournalCorruptError.
    """
    unknown = sorted(set(options) - _RUN_OPTIONS)
    if unknown:
        raise TypeError(
            f"redrive.run() got unknown option(s) {', '.join(map(repr, unknown))}; the options "
            f"are {', '.join(sorted(_RUN_OPTIONS))}"
        )
    journal, chosen = redirected(journal, options)  # inside a pytest plugin test: its journal
    if isinstance(journal, str):
        from ..storage import shared_journal

        journal = shared_journal(journal)
    return Run(journal, run_id, **chosen)


#: The keyword options of :func:`run` (those of the Run's constructor).
_RUN_OPTIONS = RunOptions.__optional_keys__


def _is_a_step_source(run: Run) -> StepSource:
    """Typing only: mypy checks here that a Run offers recorders all of :class:`StepSource`."""
    return run
