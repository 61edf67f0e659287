"""What one execution of a run knows as it goes: :class:`RunState`, shared by a Run's parts.

The parts (:mod:`._run` lists them) read and update it under its lock: the
cursor over the recorded steps, the status, the counters, and whether the
run's block has ended. It does no I/O.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from typing import Any

import attrs

from .._advice import after_end_advice
from ..errors import RunEndedError, TerminalRunError
from ..storage import RunRecord, RunStatus
from ._config import RunConfig
from ._cursor import Cursor
from ._delta import Expander
from ._faces import asker
from ._pause import Pause
from ._places import Places
from ._spend import Spend

__all__ = ["RunState"]


@attrs.define(eq=False)
class RunState:
    """The state of one execution of a run (a Run's parts share it).

    Attributes:
        config: the run's checked options.
        lock: the run's lock (reentrant): every decision and queued write holds it.
        cursor: the recorded steps not yet replayed, or None (a new run).
        finished_record: the run's record when it had already succeeded.
        status: the run's status (a :class:`~redrive.storage.RunStatus` value string).
        known_seq: the first seq written while this execution was alive.
        resumed: True when the run already existed in the journal.
        resumed_at: the seq this execution resumed at.
        replayed_steps, live_steps: the steps answered from the journal, and made live.
        reasked: the ``reasked`` notes this execution journaled.
        spend: the run's model spend and budget check (:class:`~._spend.Spend`).
        ended_why: once the run was cancelled during this execution, who and why.
        block_ended: once the run's block ended, ``(status, next seq)`` at its end.
    """

    config: RunConfig
    lock: threading.RLock = attrs.field(factory=threading.RLock)
    cursor: Cursor | None = None
    #: the last full model request per step name (to store the next one as a delta)
    requests: Expander = attrs.field(factory=Expander)
    #: live steps that hold a recorded step's place (issue positions as the record has them)
    places: Places = attrs.field(factory=Places)
    finished_record: RunRecord | None = None
    output: Any = None
    output_set: bool = False
    short_circuited: bool = False
    #: a lost append race may adopt the winner's frames (on_busy="wait", in a step's section)
    adoptable: bool = False
    known_seq: int = 0
    #: seqs of steps whose presumed holder this run waited out (async face)
    gave_up_steps: set[int] = attrs.field(factory=set)
    status: str = RunStatus.RUNNING.value
    ended_why: str | None = None
    #: why this execution stopped the run ``paused`` (see :mod:`._pause`), else None
    paused: Pause | None = None
    #: why the run waits, when a block that ends cleanly without ``finish`` is to be
    #: ``suspended`` rather than ``succeeded`` (a framework paused for a person), or a
    #: callable that says it (or None) at that end, else None
    waits_at_exit: str | Callable[[], str | None] | None = None
    block_ended: tuple[str, int] | None = None
    replayed_steps: int = 0
    live_steps: int = 0
    resumed: bool = False
    resumed_at: int = 0
    reasked: list[dict[str, Any]] = attrs.field(factory=list)
    entered: bool = False
    token: contextvars.Token[Any] | None = None
    sibling_wait: threading.Condition = attrs.field(init=False)
    #: tool steps begun in this execution and not yet ended (their outcome not yet journaled)
    open_tools: int = 0
    #: guards ``open_tools`` (its own lock: never held across I/O, so the loop never waits
    #: on the run's lock to count a step); notified each time a tool step ends
    tool_ended: threading.Condition = attrs.field(factory=threading.Condition)
    #: the run's model spend (every execution) and this execution's replay savings
    spend: Spend = attrs.field(init=False)
    #: why new tool steps are refused (the execution is stopping), or None (guarded as above)
    tools_refused: str | None = None

    def __attrs_post_init__(self) -> None:
        self.spend = Spend(self.config.run_id, self.config.budget)
        # a caller waiting for a sibling flow's step releases the run's lock while it waits
        self.sibling_wait = threading.Condition(self.lock)

    def tool_open(self) -> _ToolOpen:
        """Count a tool step as open (begun, outcome not yet journaled) while the block runs.

        Raises:
            RunEndedError: on entering, :meth:`refuse_tools` was called (nothing ran).
        """
        return _ToolOpen(self)

    def open_tool(self) -> None:
        """:meth:`tool_open`'s entry: count one more open tool step, or refuse it."""
        with self.tool_ended:
            if self.tools_refused is not None:
                raise RunEndedError(
                    f"run {self.run_id!r}: a tool step was asked for after {self.tools_refused}; "
                    "the run is stopping, so nothing was written and nothing ran. A resume "
                    f"in a new redrive.run(journal, {self.run_id!r}) block asks it again.",
                    run_id=self.run_id,
                    step="tool",
                    thread=threading.current_thread().name,
                )
            self.open_tools += 1

    def close_tool(self) -> None:
        """:meth:`tool_open`'s exit: one tool step fewer is open; wake who waits for that."""
        with self.tool_ended:
            self.open_tools -= 1
            self.tool_ended.notify_all()

    def refuse_tools(self, why: str) -> None:
        """Refuse every tool step not yet begun (:meth:`tool_open` raises); ``why`` says when."""
        with self.tool_ended:
            self.tools_refused = why

    def wait_tools_closed(self, down_to: int) -> None:
        """Block until at most ``down_to`` tool steps are open (see :meth:`tool_open`)."""
        with self.tool_ended:
            while self.open_tools > down_to:
                self.tool_ended.wait()

    @property
    def run_id(self) -> str:
        """The run's id."""
        return self.config.run_id

    @property
    def can_write(self) -> bool:
        """True when this execution may record steps (live, and not already succeeded)."""
        return self.config.live and self.finished_record is None

    def refuse_after_end(self, what: str, ran: bool = False) -> None:
        """Raise ``RunEndedError`` for ``what`` (``"tool 'charge'"``...) once the block ended.

        An attribute check, no I/O; any thread or task may call it. ``ran``: ``what`` is
        the outcome of a call that was made (a tool body ran, a model answered), so the
        message says the call ran and its step stays in flight, not that nothing ran.

        Raises:
            RunEndedError: the run's ``with`` block has ended.
        """
        ended = self.block_ended
        if ended is None:
            return
        status, seq = ended
        thread, task = asker()  # the caller's, also where a redrive I/O thread writes for it
        who = f"thread {thread!r}" + (f", task {task!r}" if task else "")
        how = (
            f"ended {status} (its run_end is seq {seq - 1})"
            if RunStatus(status).terminal
            else f"stopped with status {status} (resumable from seq {seq})"
        )
        happened = (
            "Nothing was written, but the call it answers had run (a tool body, a model "
            "call): its outcome is not journaled, and the journal keeps that step in flight "
            "(on resume a tool follows the in-flight rules: re-run if restart-safe, else "
            "blocked until a person settles it with redrive resolve; a model call is asked "
            "again)."
            if ran
            else "Nothing was written and nothing ran."
        )
        raise RunEndedError(
            f"run {self.run_id!r}: {what} was asked for from {who} after the run's block "
            f"ended: the run {how}. {happened} A thread or task "
            "that outlives its run must be joined or awaited inside the run's block; to "
            f"continue the run, resume it in a new redrive.run(journal, {self.run_id!r}) block.",
            run_id=self.run_id,
            seq=seq,
            status=status,
            step=what,
            thread=thread,
        )

    def refuse_if_ended(self, kind: str, name: str, next_seq: int) -> None:
        """Refuse a step of a run that ended during this execution, before any call goes out.

        An attribute check, no I/O: ``run.cancel()`` ends the run at once; a
        cancel from outside (``journal.cancel``) is learned at this execution's
        next write (a tool's claim, a model step's record under
        ``model_commit="write"``), so the one model call between an outside
        cancel and that write still goes out (its record is refused).

        Args:
            kind: ``"model"``, ``"tool"`` or ``"value"``: the step asked for.
            name: its step name.
            next_seq: the seq the step would get (for the error).

        Raises:
            RunEndedError: the run's ``with`` block has ended (from a thread or
                task that outlived it).
            TerminalRunError: the run was cancelled during this execution (the
                message names who cancelled it and why).
        """
        self.refuse_after_end(f"{kind} {name!r}")
        if self.ended_why is None:
            return
        raise TerminalRunError(
            f"run {self.run_id!r} was {self.ended_why} during this execution; "
            f"{kind} {name!r} was not started: no call goes out after a cancel. "
            + after_end_advice(self.run_id),
            run_id=self.run_id,
            seq=next_seq,
            status=self.status,
        )


class _ToolOpen:
    """What :meth:`RunState.tool_open` returns (a class: a generator context costs twice)."""

    __slots__ = ("_state",)

    def __init__(self, state: RunState) -> None:
        self._state = state

    def __enter__(self) -> None:
        self._state.open_tool()

    def __exit__(self, *exc: object) -> None:
        self._state.close_tool()
