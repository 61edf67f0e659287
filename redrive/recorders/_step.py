"""The recorders' one seam to the run: a typed model-step handle.

Every call a recorder (the HTTP transport, the cassette importer) makes to
the active :class:`~redrive.replay.Run` goes through this module, in the shape
of the recorder handle the run is to offer (``run.begin_model(name, request)
-> ModelStep`` with ``.recorded``, ``.response``, ``.seq`` and
``.record(response, view=...)``). When the run offers it, this module becomes
a few lines that forward to it; nothing else in ``recorders/`` changes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from ..replay import RecordedStep, Run

__all__ = ["ModelStep", "abegin_model", "before_next_step", "begin_model", "redaction"]


@attrs.define(kw_only=True)
class ModelStep:
    """One model step of a run, opened by :func:`begin_model`.

    Attributes:
        run: the run the step belongs to.
        name: the step name (``"openai:POST /chat/completions"``).
        request: the stored request (canonical, redacted), as journaled.
        recorded: True when the step replays: ``response`` is its recorded outcome.
        response: the recorded response (plain data), or None for a live step.
        seq: the seq of the step's recorded request, or None when it has none yet.
    """

    run: Run
    name: str
    request: Any
    recorded: bool
    response: Any
    seq: int | None
    _key: str
    _turn: int
    _unfinished: RecordedStep | None

    def record(self, response: Any, *, view: Any = None) -> None:
        """Journal the live step's response (group commit by the run's ``model_commit``).

        Args:
            response: the response payload (canonically encodable plain data).
            view: the semantic view journaled beside it (for ``redrive show``), or None.

        Raises:
            TypeError: the response cannot be encoded.
            LeaseLostError: another worker took the run over.
        """
        self.run.model_record(
            self.name,
            self.request,
            self._key,
            self._turn,
            response,
            view=view,
            unfinished=self._unfinished,
        )

    async def arecord(self, response: Any, *, view: Any = None) -> None:
        """The async form of :meth:`record`."""
        self.record(response, view=view)


def begin_model(run: Run, name: str, request: Any) -> ModelStep:
    """Open the model step the loop asks for: matched against the record, or live.

    Args:
        run: the active run.
        name: the step name.
        request: the request (canonically encodable plain data).

    Returns:
        The step: ``recorded`` with its ``response`` when it replays, else
        live (the caller makes the call and :meth:`ModelStep.record` s it).

    Raises:
        DivergenceError: strict replay, and the request differs from the record.
        ReplayMissError: the run may not go live and nothing recorded matches.
        LeaseLostError: another worker took the run over.
    """
    step, stored, key, turn = run.model_begin(name, request)
    recorded = step is not None and step.end is not None
    response = None
    if step is not None and step.end is not None:
        response = step.end.data().get("response")
    return ModelStep(
        run=run,
        name=name,
        request=stored,
        recorded=recorded,
        response=response,
        seq=step.seq if step is not None else None,
        key=key,
        turn=turn,
        unfinished=step,
    )


async def abegin_model(run: Run, name: str, request: Any) -> ModelStep:
    """The async form of :func:`begin_model`."""
    return begin_model(run, name, request)


def before_next_step(run: Run, settle: Callable[[], None]) -> None:
    """Have ``settle()`` called before the loop's next step in this flow, or at a clean end.

    For a step the loop can leave open (a stream it stops reading without
    closing): ``settle`` journals what the loop saw, before what follows it.
    """
    run.before_next_step(settle)


def redaction(run: Run) -> Callable[[Any], Any] | None:
    """The run's ``redact`` path patterns as ``value -> value``, or None when it has none."""
    return run.redact if run.redacting else None
