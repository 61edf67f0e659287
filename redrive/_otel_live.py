"""Spans as a run's steps finish: :func:`redrive.otel.instrument` (the live way in).

Public through :mod:`redrive.otel`.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

from ._otel_spans import (
    _SCHEMA,
    _SCOPE,
    _CallIds,
    _clean,
    _fingerprint,
    _need_otel,
    _run_status,
    _status,
    _step_span,
)
from ._scrub import mask_text
from .frames import Frame, Kind
from .replay import RecordedStep, StepReader, set_step_observer

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider


class _Live:
    """The step observer :func:`instrument` installs: spans as a run's steps finish."""

    def __init__(self, tracer: Any, *, replayed_spans: bool) -> None:
        self.tracer = tracer
        self.replayed_spans = replayed_spans
        self.lock = threading.Lock()
        self.roots: dict[str, Any] = {}
        self.readers: dict[str, StepReader] = {}
        self.ids: dict[str, _CallIds] = {}

    def __call__(self, event: str, info: dict[str, Any]) -> None:
        if event == "opened":
            self._opened(info["run"], info.get("known_seq", 0))
        elif event == "closed":
            self._closed(info["run"], info.get("error"))
        elif event == "frames":
            self._frames(info["run_id"], info["frames"])
        elif event == "replayed":
            self._replayed(info["run_id"], info["step"])

    def _opened(self, run: Any, known_seq: int) -> None:
        from opentelemetry.trace import SpanKind

        agent = run.entrypoint or run.run_id
        span = self.tracer.start_span(
            mask_text(f"invoke_agent {agent}"),
            kind=SpanKind.INTERNAL,
            attributes=_clean(
                {
                    "gen_ai.operation.name": "invoke_agent",
                    "gen_ai.agent.name": agent,
                    "redrive.run.id": run.run_id,
                    "redrive.run.resumed": bool(run.resumed),
                }
            ),
        )
        reader = StepReader(run.run_id, verify=False)
        if run.resumed:
            _read_before(reader, run, known_seq)
        with self.lock:
            self.roots[run.run_id] = span
            self.readers[run.run_id] = reader
            self.ids[run.run_id] = _CallIds()

    def _closed(self, run: Any, error: BaseException | None) -> None:
        with self.lock:
            span = self.roots.pop(run.run_id, None)
            self.readers.pop(run.run_id, None)
            self.ids.pop(run.run_id, None)
        if span is None:
            return
        span.set_attribute("redrive.run.status", str(run.status))
        span.set_attribute("redrive.run.replayed_steps", int(run.replayed_steps))
        span.set_attribute("redrive.run.live_steps", int(run.live_steps))
        if error is not None:
            span.set_attribute("error.type", type(error).__qualname__)
            span.set_status(_status(type(error).__qualname__))
        else:
            span.set_status(_run_status(str(run.status)))
        span.end()

    def _frames(self, run_id: str, frames: list[Frame]) -> None:
        with self.lock:
            root, reader, ids = (
                self.roots.get(run_id),
                self.readers.get(run_id),
                self.ids.get(run_id),
            )
            if root is None or reader is None or ids is None:
                return
            done: list[RecordedStep] = []
            for frame in frames:
                if frame.kind == Kind.RUN_START.value:
                    root.set_attribute("redrive.run.fingerprint", _fingerprint(frame.data()) or "")
                try:
                    reader.feed(frame)
                except Exception:
                    _unresolved(reader, frame)
                    continue
                ref = frame.data().get("step") if frame.kind in _ENDS else None
                step = reader.steps.pop(ref, None) if isinstance(ref, int) else None
                if step is not None:
                    done.append(step)
        for step in done:
            _step_span(self.tracer, root, step, ids, replayed=False)

    def _replayed(self, run_id: str, step: RecordedStep) -> None:
        with self.lock:
            root, ids = self.roots.get(run_id), self.ids.get(run_id)
        if root is None or ids is None:
            return
        if self.replayed_spans:
            _step_span(self.tracer, root, step, ids, replayed=True)
        elif step.kind == "model":  # no span, but a live tool after it keeps its call id
            ids.model(step.data, step.outcome)
        elif step.kind == "tool":
            ids.take(step.name, step.args)


def _read_before(reader: StepReader, run: Any, known_seq: int) -> None:
    """Feed ``reader`` the frames a resumed run holds from before this execution.

    ``known_seq`` is the first seq this execution may write.

    A step in flight at the crash (opened then, finished now) then gets its
    live span when its outcome is written; the observer runs where the run's
    journal I/O runs (off the event loop on the async face). A journal that
    cannot be read leaves the reader empty: telemetry never fails a run.
    """
    try:
        for frame in run.journal.frames(run.run_id):
            if frame.seq >= known_seq:
                break
            reader.feed(frame)
    except Exception:  # pragma: no cover - a damaged journal: the run itself reports it
        logging.getLogger("redrive").debug("otel: cannot read run %r before resume", run.run_id)


def _unresolved(reader: StepReader, frame: Frame) -> None:
    """Keep a model request the reader could not resolve, as it is stored.

    A resumed execution's reader starts at the frames it writes, so a request
    stored as a prefix delta of one from before the crash cannot be expanded:
    its span only needs the scalar fields of its view, which a delta keeps.
    (A resumed run's reader is fed the frames from before it, so an outcome
    of a step opened before this execution resolves.)
    """
    if frame.kind != Kind.MODEL_REQUEST.value:
        return
    data = frame.data()
    reader.steps[frame.seq] = RecordedStep(
        seq=frame.seq,
        kind="model",
        name=frame.name,
        key=frame.key,
        start=frame,
        end=None,
        turn=int(data.get("turn", 0)),
        data=data,
    )


_ENDS = frozenset({Kind.MODEL_RESPONSE.value, Kind.TOOL_DONE.value, Kind.TOOL_ERROR.value})


def instrument(
    tracer_provider: TracerProvider | None = None, *, replayed_spans: bool = True
) -> None:
    """Emit every run's spans live, from now on, through ``tracer_provider``.

    A live step's span is emitted when its outcome is journaled (with the
    step's real start and end times); a replayed step's when the record
    hands it back (``redrive.step.replayed`` True, no call made); the run's
    root span when the execution ends (status ``OK`` when it succeeded,
    ``ERROR`` with ``error.type`` when it raised; it counts the replayed and
    live steps in ``redrive.run.replayed_steps`` / ``redrive.run.live_steps``).
    The root span starts in the caller's current OpenTelemetry context, so a
    run inside a request's or job's span is traced under it; step spans are
    children of the root, never of each other (parallel tool calls are
    siblings). Spans are handed to the provider on the thread that did the
    step (for an async run, a worker thread, never the event loop): give the
    provider a ``BatchSpanProcessor``, so exporting never holds a step up.
    Replaces an earlier :func:`instrument`.

    Args:
        tracer_provider: the provider to use (None: OpenTelemetry's global one,
            ``opentelemetry.trace.get_tracer_provider()``).
        replayed_spans: emit a span for each replayed step (True, the
            default, marked ``redrive.step.replayed``), or none (False): a
            resumed or re-driven run then reports only the work it really
            did, not the record again (the telemetry inflation replay causes
            in peers: pydantic/pydantic-ai#6974, temporalio/sdk-java#952).

    Raises:
        ImportError: the OpenTelemetry SDK is not installed (``pip install 'redrive[otel]'``).
    """
    _need_otel()
    from opentelemetry import trace

    provider = tracer_provider or trace.get_tracer_provider()
    tracer = provider.get_tracer(_SCOPE, schema_url=_SCHEMA)
    set_step_observer(_Live(tracer, replayed_spans=replayed_spans))


def uninstrument() -> None:
    """Stop emitting spans (undo :func:`instrument`); runs open now end without their root span."""
    set_step_observer(None)
