"""Record and replay a model client's HTTP exchanges as model steps (httpx transports).

:class:`RecordingTransport` wraps the transport an SDK's httpx client sends
through; one class serves sync and async clients (:class:`AsyncRecordingTransport`
is the same class). Outside a run it passes every request straight to the
inner transport. Inside a run each exchange is
one model step (see :mod:`redrive.recorders._step`):

* the step name is ``"{provider}:{METHOD} {path}"``, the path the endpoint the
  request calls (``/chat/completions``, ``/responses``, ``/v1/messages``...;
  :mod:`~redrive.recorders._endpoints`), whatever path prefix the host puts
  before it and wherever the client's base URL ends (so a run recorded against
  ``api.openai.com`` replays against a local proxy, Gemini's
  ``/v1beta/openai``, Azure's ``/openai/deployments/{d}``, or through an httpx
  client a framework hands the SDK); a path that calls no known endpoint is
  relative to the client's base URL;
* the request is ``{method, path, query, body}`` with the JSON body parsed;
  headers (user agent, ``x-stainless-*`` retry counters, request ids,
  authorization, content length, compression) are not part of it;
* the response is stored decoded, its ``Content-Encoding`` kept beside it
  (``"content_encoding"``), its headers scrubbed of credentials and cookies,
  and a server-sent-event stream as its ordered events (``chunks``); replay
  hands them back one by one. The caller gets an unread response, recorded
  or replayed, as httpx hands a live one: ``read``, ``iter_raw``,
  ``iter_bytes``, ``iter_text``, ``iter_lines`` and their async twins work
  as they do live (``iter_raw`` gives the body encoded, by the server while
  recording, encoded again on replay: :mod:`~redrive.recorders._reencode`);
* a stream the caller closes before its final event (it read enough) is
  recorded as it was received, marked ``"partial": True``: replay hands back
  the same events, and raises :class:`~redrive.DivergenceError` if the
  replayed loop reads past them. A stream cut off otherwise (the process
  dies, the connection breaks, an exception unwinds through it) is not
  recorded: on resume the step is requested again, live;
* a transient error response (408, 409, 429, 5xx, or ``x-should-retry:
  true``) is never recorded live, retries left or not: the SDK's exception
  propagates, the step stays unfinished and a resume asks it again. The
  exception the wrapped SDK client raises for it carries ``retryable = True``
  (so the run stays resumable); an exception the inner transport raises
  (connection refused, timeout...) gets ``retryable = True`` too before the
  SDK wraps it (it is the ``__cause__`` of the SDK's ``APIConnectionError``,
  which carries ``retryable = True`` as well).
  Other errors (400, 401, 403, 404, 422...) are recorded and replay as the
  same error, whose SDK exception carries ``retryable = False``; so do
  transient errors imported from a cassette. A replayed error carries
  ``x-should-retry: false`` so the SDK raises it at once.

The stored payload of a ``model_response`` frame is described in
:mod:`redrive.recorders._exchange`.

This module is the public face of the parts, each in its own module:

* :mod:`~redrive.recorders._secrets`: what never reaches a journal;
* :mod:`~redrive.recorders._sse`: server-sent-event framing (the one parser);
* :mod:`~redrive.recorders._exchange`: the stored request and response forms;
* :mod:`~redrive.recorders._endpoints`: the endpoint a request path calls;
* :mod:`~redrive.recorders._reencode`: a stored body encoded again for replay;
* :mod:`~redrive.recorders._provider`: transient statuses, ``retryable`` marking;
* :mod:`~redrive.recorders._recorder`: :class:`HttpRecorder`, one model step per exchange;
* :mod:`~redrive.recorders._step`: the one seam to the run (a model-step handle);
* :mod:`~redrive.recorders._streams`: the live tap and the replayed stream;
* :mod:`~redrive.recorders._transports`: :class:`RecordingTransport` (sync and async).
"""

from __future__ import annotations

from ._exchange import describe_request, parse_query, response_payload
from ._provider import RETRYABLE_EXTENSION, default_should_retry, is_transient
from ._recorder import HttpRecorder, ViewFn
from ._secrets import SECRET_HEADERS, SECRET_QUERY_PARAMS, scrub_headers
from ._sse import is_terminal_event, split_events
from ._transports import AsyncRecordingTransport, RecordingTransport

__all__ = [
    "RETRYABLE_EXTENSION",
    "SECRET_HEADERS",
    "SECRET_QUERY_PARAMS",
    "AsyncRecordingTransport",
    "HttpRecorder",
    "RecordingTransport",
    "ViewFn",
    "default_should_retry",
    "describe_request",
    "is_terminal_event",
    "is_transient",
    "parse_query",
    "response_payload",
    "scrub_headers",
    "split_events",
]
