"""The recorder-facing handles: one typed object per step a recorder opens.

A recorder asks the active run for a step (``run.begin_model(name, request)``,
``run.begin_tool(spec, arguments)``, ``run.begin_value(name, label)``) and gets
a handle. ``handle.recorded`` says whether the journal answers the step; if it
does the recorder hands back the recorded outcome (``.response``, ``.result``
or ``.error``, ``.value``) without calling anything; if not it makes the live
call and ``.record(...)``\\ s what came back (``.fail(exc)`` for a tool that
raised). Each handle has an async form of its writing methods (``arecord``,
``afail``) that keeps the journal work off the event loop.

:class:`StepSource` is the part of a Run that recorders use; the user's part
(``finish``, ``status``, ``output``, ``resume_note``, ``frames``) is not in it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import attrs

from ..frames import rebuild, store
from ._cursor import RecordedStep, decode_outcome
from ._faces import off_loop

if TYPE_CHECKING:
    from ._state import Issue
    from ._tools import ToolSpec, _Plan

__all__ = ["ModelStep", "StepSource", "ToolStep", "ValueStep"]


class _ModelWriter(Protocol):
    @property
    def run_id(self) -> str: ...

    def _record_model(self, step: ModelStep, response: Any, view: Any, partial: bool) -> int: ...

    def _model_done(self, handle: ModelStep) -> None: ...


class _ToolWriter(Protocol):
    def _tool_done(self, spec: ToolSpec, plan: _Plan, value: Any) -> Any: ...

    def _tool_failed(self, spec: ToolSpec, plan: _Plan, exc: BaseException) -> None: ...


class _ValueWriter(Protocol):
    def _record_value(self, step: ValueStep, value: Any) -> Any: ...


def _once(kind: str, name: str, recorded: bool, done: bool) -> None:
    if recorded:
        raise RuntimeError(f"{kind} step {name!r} is recorded: hand back its recorded outcome")
    if done:
        raise RuntimeError(f"{kind} step {name!r} was already recorded by this handle")


@attrs.define(eq=False)
class ModelStep:
    """One model step, as a recorder sees it (from :meth:`Run.begin_model`).

    Attributes:
        name: the step name (``"model:gpt-4o"``...).
        request: the request as journaled (canonical, ``redact`` paths replaced).
        recorded: True when the journal holds this step's response: return
            :attr:`response` and call nothing.
        unfinished: True when the journal holds this request with no response
            (the worker died mid-call): the live response completes that step.
        seq: the seq of the step's ``model_request`` frame; None for a live
            step until :meth:`record` is called.
        turn: the number of model steps the loop completed before this one.
    """

    name: str
    request: Any
    recorded: bool
    unfinished: bool
    seq: int | None
    turn: int
    _writer: _ModelWriter = attrs.field(repr=False)
    _key: str = attrs.field(repr=False)
    _step: RecordedStep | None = attrs.field(repr=False)
    _started: float | None = attrs.field(default=None, repr=False)
    _done: bool = attrs.field(default=False, repr=False)
    #: where the loop issued a live step (journaled with its request), or None
    _issue: Issue | None = attrs.field(default=None, repr=False)

    @property
    def key(self) -> str:
        """The step's match key (xxh3-128 of its name and matched request view)."""
        return self._key

    @property
    def response(self) -> Any:
        """The recorded response, as the live step handed it back (types and key order kept).

        Raises:
            RuntimeError: the step is not recorded (make the call and :meth:`record` it).
        """
        return self._outcome()[0]

    @property
    def partial(self) -> bool:
        """True when the recorded response was marked partial (a stream closed early).

        Raises:
            RuntimeError: the step is not recorded.
        """
        return self._outcome()[1]

    def _outcome(self) -> tuple[Any, bool]:
        if not self.recorded or self._step is None:
            raise RuntimeError(f"model step {self.name!r} is not recorded: it has no response")
        data = decode_outcome(self._step)
        where = f"seq {self._step.seq}: model {self.name!r} response"
        return rebuild(data.get("response"), where=where), bool(data.get("partial", False))

    def record(self, response: Any, *, view: Any = None, partial: bool = False) -> Any:
        """Journal the live response of this step (per the run's ``model_commit``).

        Args:
            response: the response as canonically encodable plain data.
            view: the decoded semantic view (provider, model, messages, usage...).
            partial: the response is incomplete (a stream the caller closed early).

        Returns:
            ``response`` as a replay hands it back: the same types, values and
            dict key order (see :func:`redrive.frames.encode_value`).

        Raises:
            TypeError: ``response`` or ``view`` cannot be encoded canonically.
            RuntimeError: the step is recorded, or this handle already recorded it.
            LeaseLostError, RunBusyError, JournalWriteError: the write was refused.
        """
        _once("model", self.name, self.recorded, self._done)
        try:
            packed, data = store(response, "response")
        except TypeError as exc:
            raise TypeError(
                f"run {self._writer.run_id!r}: model step {self.name!r} answered, but its "
                f"response cannot be journaled: {exc}. Return plain data, or give the recorder "
                "an encode/decode pair or a codec (redrive.frames.register_codec)."
            ) from None
        self.seq = self._writer._record_model(self, packed, view, partial)
        self._done = True
        return data

    async def arecord(self, response: Any, *, view: Any = None, partial: bool = False) -> Any:
        """The async form of :meth:`record`: the journal write runs off the event loop.

        The calling task's flow moves past the step here, in the task itself:
        the write ran in a copy of its context, so the steps the task asks for
        next are issued after this one (as on the sync face), whoever records.
        """
        data = await off_loop(lambda: self.record(response, view=view, partial=partial))
        self._writer._model_done(self)
        return data


@attrs.define(eq=False)
class ToolStep:
    """One tool step, as a recorder sees it (from :meth:`Run.begin_tool`).

    Attributes:
        name: the tool's step name.
        seq: the seq of the step's ``tool_start`` frame.
        idempotency_key: ``"{run_id}:{seq}:{tool}"``, the same on every resume.
        recorded: True when the step has an outcome to hand back (:meth:`outcome`):
            recorded, settled by ``recover()``, or the not-safely-resumable outcome
            under ``on_in_flight="tell_model"``. False: the step is claimed; run the
            body, then :meth:`record` its result or :meth:`fail` with its exception.
        result: the recorded result (None when recorded as an error, or live).
        error: the recorded exception, rebuilt (None when none).
        fencing_token: live under a run lease, the lease epoch the body runs
            under (confirmed after the claim committed); None otherwise.
    """

    name: str
    seq: int
    idempotency_key: str
    recorded: bool
    result: Any
    error: BaseException | None
    _writer: _ToolWriter = attrs.field(repr=False)
    _spec: ToolSpec = attrs.field(repr=False)
    _plan: _Plan = attrs.field(repr=False)
    _done: bool = attrs.field(default=False, repr=False)
    fencing_token: int | None = attrs.field(default=None, kw_only=True)

    def outcome(self) -> Any:
        """Return the recorded result, or raise the recorded exception.

        Raises:
            RuntimeError: the step is live (it has no recorded outcome).
        """
        if not self.recorded:
            raise RuntimeError(f"tool step {self.name!r} is live: it has no recorded outcome")
        if self.error is not None:
            raise self.error
        return self.result

    def record(self, value: Any) -> Any:
        """Journal the body's result (durable before this returns).

        Returns:
            The result as a replay hands it back (same types, values, dict key order).

        Raises:
            TypeError: the result cannot be encoded (the step is recorded as failed).
            RuntimeError: the step is recorded, or this handle already settled it.
            LeaseLostError, RunBusyError, JournalWriteError: the write was refused.
        """
        _once("tool", self.name, self.recorded, self._done)
        self._done = True
        return self._writer._tool_done(self._spec, self._plan, value)

    def fail(self, exc: BaseException) -> None:
        """Journal that the body raised ``exc`` (a cancellation leaves the step in flight).

        Raises:
            RuntimeError: the step is recorded, or this handle already settled it.
            LeaseLostError, RunBusyError, JournalWriteError: the write was refused.
        """
        _once("tool", self.name, self.recorded, self._done)
        self._done = True
        self._writer._tool_failed(self._spec, self._plan, exc)

    async def arecord(self, value: Any) -> Any:
        """The async form of :meth:`record`: the journal write runs off the event loop."""
        return await off_loop(self.record, value)

    async def afail(self, exc: BaseException) -> None:
        """The async form of :meth:`fail` (a cancellation is not written: nothing to await)."""
        if isinstance(exc, Exception):
            await off_loop(self.fail, exc)
        else:
            self.fail(exc)


@attrs.define(eq=False)
class ValueStep:
    """One recorded value (``now``, ``uuid4``, ``random``, an approval): see ``begin_value``.

    Attributes:
        name: the value's kind (``"now"``...).
        label: the call site's label (matched with ``name`` within the turn).
        recorded: True when the journal holds the value: return :attr:`value`.
        value: the recorded value (None while live).
    """

    name: str
    label: str
    recorded: bool
    value: Any
    _writer: _ValueWriter = attrs.field(repr=False)
    _args: dict[str, Any] = attrs.field(repr=False)
    _key: str = attrs.field(repr=False)
    _done: bool = attrs.field(default=False, repr=False)

    def record(self, value: Any) -> Any:
        """Queue the live value (written with the run's next durable write) and return it.

        Raises:
            RuntimeError: the value is recorded, or this handle already recorded it.
        """
        _once("value", self.name, self.recorded, self._done)
        self._done = True
        return self._writer._record_value(self, value)


class StepSource(Protocol):
    """What recorders use of a run: open steps, settle open streams, redact.

    :class:`~redrive.replay.Run` implements it; recorders should need nothing
    else of the run (the user's part: ``finish``, ``status``, ``output``...).
    """

    @property
    def run_id(self) -> str:
        """The run's id."""
        ...

    @property
    def redacting(self) -> bool:
        """True when the run was given ``redact`` path patterns."""
        ...

    def begin_model(self, name: str, request: Any, *, ignore: tuple[str, ...] = ()) -> ModelStep:
        """Open a model step (see :meth:`Run.begin_model`; ``ignore``: paths out of its key)."""
        ...

    async def abegin_model(
        self, name: str, request: Any, *, ignore: tuple[str, ...] = ()
    ) -> ModelStep:
        """Open a model step off the event loop."""
        ...

    def begin_tool(self, spec: ToolSpec, arguments: dict[str, Any]) -> ToolStep:
        """Open (and, live, claim) a tool step (see :meth:`Run.begin_tool`)."""
        ...

    async def abegin_tool(self, spec: ToolSpec, arguments: dict[str, Any]) -> ToolStep:
        """Open a tool step off the event loop."""
        ...

    def begin_value(self, name: str, label: str, *, extra: Any = None) -> ValueStep:
        """Open a recorded value (see :meth:`Run.begin_value`)."""
        ...

    def before_next_step(self, settle: Callable[[], None]) -> None:
        """Run ``settle()`` before this flow's next step begins."""
        ...

    def redact(self, value: Any) -> Any:
        """Return canonical ``value`` with the run's ``redact`` paths replaced."""
        ...
