"""The recorders' one seam to the run: the run's typed model-step handle.

Every call a recorder (the HTTP transport, its streams, the cassette importer)
makes to the active :class:`~redrive.replay.Run` goes through this module. It
forwards to the run's recorder handle (``run.begin_model(name, request,
ignore=...)`` / ``await run.abegin_model(...)`` -> :class:`redrive.replay.ModelStep`,
then ``step.record(...)`` / ``await step.arecord(...)``), so the async face
never does journal I/O on the event loop. :class:`ModelStep` here only adds
the run the step belongs to (recorders read its id and its redaction).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import attrs

from .. import replay
from ..replay import StepSource

__all__ = ["ModelStep", "abegin_model", "before_next_step", "begin_model", "redaction"]


@attrs.frozen
class ModelStep:
    """One model step of a run, opened by :func:`begin_model` (the run's handle and the run).

    Attributes:
        run: the run the step belongs to.
        handle: the run's handle of the step (:class:`redrive.replay.ModelStep`).
    """

    run: StepSource
    handle: replay.ModelStep

    @property
    def name(self) -> str:
        """The step name (``"openai:POST /chat/completions"``)."""
        return self.handle.name

    @property
    def request(self) -> Any:
        """The stored request (canonical, redacted), as journaled."""
        return self.handle.request

    @property
    def recorded(self) -> bool:
        """True when the step replays: :attr:`response` is its recorded outcome."""
        return self.handle.recorded

    @property
    def response(self) -> Any:
        """The recorded response (plain data); None for a live step."""
        return self.handle.response if self.handle.recorded else None

    @property
    def seq(self) -> int | None:
        """The seq of the step's recorded request, or None when it has none yet."""
        return self.handle.seq

    def record(self, response: Any, *, view: Any = None, partial: bool = False) -> None:
        """Journal the live step's response (written per the run's ``model_commit``).

        Args:
            response: the response payload (canonically encodable plain data).
            view: the semantic view journaled beside it (for ``redrive show``), or None.
            partial: the response is incomplete (a stream the caller closed early).

        Raises:
            TypeError: the response cannot be encoded.
            LeaseLostError, RunBusyError, JournalWriteError: the write was refused.
        """
        self.handle.record(response, view=view, partial=partial)

    async def arecord(self, response: Any, *, view: Any = None, partial: bool = False) -> None:
        """The async form of :meth:`record`: the journal write runs off the event loop."""
        await self.handle.arecord(response, view=view, partial=partial)


def begin_model(
    run: StepSource, name: str, request: Any, *, ignore: Sequence[str] = ()
) -> ModelStep:
    """Open the model step the loop asks for: matched against the record, or live.

    Args:
        run: the active run.
        name: the step name.
        request: the request (canonically encodable plain data).
        ignore: path patterns of ``request`` left out of the match (model-minted
            ids: :data:`redrive.recorders._provider.MODEL_ID_PATHS`).

    Returns:
        The step: ``recorded`` with its ``response`` when it replays, else
        live (the caller makes the call and :meth:`ModelStep.record` s it).

    Raises:
        DivergenceError: strict replay, and the request differs from the record.
        ReplayMissError: the run may not go live and nothing recorded matches.
        LeaseLostError: another worker took the run over.
    """
    return ModelStep(run, run.begin_model(name, request, ignore=tuple(ignore)))


async def abegin_model(
    run: StepSource, name: str, request: Any, *, ignore: Sequence[str] = ()
) -> ModelStep:
    """The async form of :func:`begin_model`: the journal work runs off the event loop."""
    return ModelStep(run, await run.abegin_model(name, request, ignore=tuple(ignore)))


def before_next_step(run: StepSource, settle: Callable[[], None]) -> None:
    """Have ``settle()`` called before the loop's next step in this flow, or at a clean end.

    For a step the loop can leave open (a stream it stops reading without
    closing): ``settle`` journals what the loop saw, before what follows it.
    """
    run.before_next_step(settle)


def redaction(run: StepSource) -> Callable[[Any], Any] | None:
    """The run's ``redact`` path patterns as ``value -> value``, or None when it has none."""
    return run.redact if run.redacting else None
