"""The recorder of HTTP exchanges: one model step per exchange, without I/O of its own."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from ..replay import Run
from ._exchange import describe_request
from ._provider import MODEL_ID_PATHS, STREAM_GRAMMARS, default_should_retry, is_transient
from ._secrets import redact_body
from ._step import ModelStep, abegin_model, begin_model, redaction

__all__ = ["HttpRecorder", "ViewFn"]

ViewFn = Callable[[dict[str, Any], dict[str, Any]], Any]


@attrs.define
class HttpRecorder:
    """The I/O-free half of the transport: names, request/response forms, retry and views.

    Attributes:
        provider: ``"openai"``, ``"anthropic"``, or any label.
        base_path: the client's base URL path, stripped from step names.
        view: ``view(request, response_payload) -> dict`` (the semantic view), or None.
        should_retry: ``fn(response) -> bool`` as the SDK decides retries, or None
            for the common rule (``x-should-retry``, 408, 409, 429, 5xx).
        max_retries: ``fn() -> int``, the SDK client's retry budget.
        family: the API family whose endpoints name the steps (``"openai"``,
            ``"anthropic"``; see :mod:`redrive.recorders._endpoints`), or None
            for ``provider``'s own.
    """

    provider: str
    base_path: str = ""
    view: ViewFn | None = None
    should_retry: Callable[[Any], bool] | None = None
    max_retries: Callable[[], int] = lambda: 0
    family: str | None = None

    def describe(self, request: Any) -> tuple[str, dict[str, Any]]:
        """Return the model step ``(name, request)`` of an httpx request (its body read)."""
        url = request.url
        return describe_request(
            self.provider,
            self.base_path,
            request.method,
            url.path,
            url.params.multi_items(),
            bytes(request.content),
            request.headers.get("content-type", ""),
            family=self.family,
        )

    def begin(self, run: Run, request: Any) -> ModelStep:
        """Open the model step of an httpx request (its body read) in ``run``.

        Returns:
            The step; when it replays, its ``response`` is a stored response payload.

        Raises:
            DivergenceError, ReplayMissError: see :func:`redrive.recorders._step.begin_model`.
            TypeError: the recorded response was not recorded by an HTTP recorder.
        """
        return self._checked(begin_model(run, *self.describe(request), ignore=self.ignore))

    async def abegin(self, run: Run, request: Any) -> ModelStep:
        """The async form of :meth:`begin`."""
        return self._checked(await abegin_model(run, *self.describe(request), ignore=self.ignore))

    @property
    def ignore(self) -> tuple[str, ...]:
        """Where this provider's requests carry model-minted ids (left out of a match)."""
        return MODEL_ID_PATHS.get(self.provider, ())

    @property
    def terminal_required(self) -> bool:
        """Whether this provider's streams end with a final event (:data:`STREAM_GRAMMARS`)."""
        return self.provider in STREAM_GRAMMARS

    def _checked(self, step: ModelStep) -> ModelStep:
        if step.recorded and not isinstance(step.response, dict):
            raise TypeError(
                f"run {step.run.run_id!r} seq {step.seq}: the recorded response of "
                f"{step.name!r} is not an HTTP response payload; it was recorded by another "
                "recorder"
            )
        return step

    def should_record(self, request: Any, response: Any) -> bool:
        """Whether a live, non-streamed response is the step's outcome (and is journaled).

        False for a transient error (:func:`is_transient`) and for a response
        the SDK will retry (:meth:`is_final`).
        """
        if is_transient(response.status_code, response.headers):
            return False
        return self.is_final(request, response)

    def is_final(self, request: Any, response: Any) -> bool:
        """False when the SDK will retry this response (so it is not what the caller gets)."""
        status = response.status_code
        if status < 400 and response.headers.get("x-should-retry") != "true":
            return True
        if self.should_retry is not None:
            retry = bool(self.should_retry(response))
        else:
            retry = default_should_retry(status, dict(response.headers))
        if not retry:
            return True
        try:
            taken = int(request.headers.get("x-stainless-retry-count", "0"))
        except ValueError:
            taken = 0
        return taken >= self.max_retries()

    def make_view(self, request: dict[str, Any], payload: dict[str, Any]) -> Any:
        """Return the semantic view, or a minimal one when the view function fails."""
        base: dict[str, Any] = {"provider": self.provider, "status": payload["status"]}
        if payload.get("partial"):
            base["partial"] = True
        if self.view is None:
            return base
        try:
            view = self.view(request, payload)
        except Exception as exc:  # a view is for reading; it never blocks a recording
            return {**base, "view_error": f"{type(exc).__name__}: {exc}"}
        return {**base, **view} if isinstance(view, dict) else base

    def stored(self, step: ModelStep, payload: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        """Return ``(payload, view)`` as journaled: the JSON body redacted by the run, the view."""
        payload = redact_body(payload, redaction(step.run))
        return payload, self.make_view(step.request, payload)

    def record(self, step: ModelStep, payload: dict[str, Any]) -> None:
        """Journal a finished exchange as the live ``step``."""
        payload, view = self.stored(step, payload)
        step.record(payload, view=view, partial=bool(payload.get("partial")))

    async def arecord(self, step: ModelStep, payload: dict[str, Any]) -> None:
        """The async form of :meth:`record`."""
        payload, view = self.stored(step, payload)
        await step.arecord(payload, view=view, partial=bool(payload.get("partial")))
