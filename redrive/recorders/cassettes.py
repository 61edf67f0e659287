"""Import VCR-style cassettes (YAML or JSON) of OpenAI / Anthropic traffic into a journal as a run.

Three on-disk dialects are read, from YAML (PyYAML, the ``cassettes`` extra:
``pip install 'redrive[cassettes]'``) or JSON (the standard library; vcrpy's
``serializer="json"``):

* classic vcrpy: ``response: {status: {code, message}, headers, body: {string}}``;
  the body is as it was on the wire (``!!binary`` gzip with ``Content-Encoding: gzip``);
* pydantic-ai's serializer: JSON bodies stored decoded under ``parsed_body``
  (request and response), non-JSON bodies under ``body.string``;
* vcrpy's older httpx stub: ``response: {status_code, http_version, content}``;
  the content is stored decoded (a ``Content-Encoding`` header is stale).

A body stored as sent is decoded by its ``Content-Encoding`` (stacked codings
too, the last applied first): every coding httpx decodes (``identity``,
``gzip``, ``deflate``; ``br`` with brotli installed; ``zstd`` with zstandard
installed). An unknown coding, or a body that is not what its coding says,
is refused with :class:`CassetteError` naming the interaction.

Which interactions are model calls: every one to ``api.openai.com`` or
``api.anthropic.com``, and on any other host (Azure OpenAI, Gemini's OpenAI
endpoint, OpenRouter, vLLM, Ollama...) one whose path has the shape of an
OpenAI endpoint (``.../chat/completions``, ``.../completions``,
``.../responses``, ``.../embeddings``, ``.../moderations``) or of an Anthropic
one (``.../v1/messages``, ``.../v1/complete``); the client's base URL is the
path before it. Any other interaction (a telemetry POST between model calls)
is skipped, and the run gets a note ``cassette: skipped interaction`` saying
which and why; a cassette without a single model call is refused.

Each model call becomes one model step, stored exactly as
:func:`redrive.wrap` would have recorded it live (decoded body, scrubbed
headers, SSE events as chunks), so the run replays through the real SDK.
"""

from __future__ import annotations

import json
import urllib.parse
from pathlib import Path
from typing import Any, Literal

import attrs

from ..frames import encode
from ..replay import Run
from ..storage import Journal
from ._exchange import (
    ContentEncodingError,
    content_codings,
    decode_content,
    describe_request,
    parse_query,
    response_payload,
)
from ._recorder import HttpRecorder
from ._secrets import secret_query_param
from ._sse import split_events
from ._step import begin_model
from .anthropic import anthropic_view
from .openai import openai_view

__all__ = ["CassetteError", "Interaction", "import_cassette", "load_cassette", "model_call_of"]

Provider = Literal["openai", "anthropic"]

#: host -> (provider, base path the SDK's default base URL has).
PROVIDERS: dict[str, tuple[Provider, str]] = {
    "api.openai.com": ("openai", "/v1"),
    "api.anthropic.com": ("anthropic", ""),
}
#: The path shapes of model calls on other hosts: the segments that follow the
#: client's base URL (an OpenAI base URL ends in ``/v1`` or its like; an
#: Anthropic one does not, its paths start ``/v1``).
ENDPOINTS: dict[Provider, tuple[tuple[str, ...], ...]] = {
    "openai": (
        ("chat", "completions"),
        ("completions",),
        ("responses",),
        ("embeddings",),
        ("moderations",),
    ),
    "anthropic": (("v1", "messages"), ("v1", "complete")),
}
_VIEWS = {"openai": openai_view, "anthropic": anthropic_view}
#: The name of the note an import writes for each interaction it skips.
SKIPPED_NOTE = "cassette: skipped interaction"


class CassetteError(ValueError):
    """A cassette cannot be imported; the message says which file, which interaction and why."""


@attrs.frozen(kw_only=True)
class Interaction:
    """One request/response pair of a cassette, with the body bytes as recorded.

    Attributes:
        method, uri: the request line.
        request_body: the request body bytes (re-serialized JSON for ``parsed_body``).
        request_headers: ``[(name, value), ...]``.
        status: the response status.
        headers: the response headers ``[(name, value), ...]`` as recorded.
        body: the response body bytes as recorded (possibly compressed).
        decoded: the cassette stores the body decoded (``parsed_body``, or the
            older httpx stub's ``content``): a ``Content-Encoding`` header is stale.
    """

    method: str
    uri: str
    request_body: bytes
    request_headers: list[tuple[str, str]]
    status: int
    headers: list[tuple[str, str]]
    body: bytes
    decoded: bool = False

    def decoded_body(self) -> bytes:
        """The response body with its ``Content-Encoding`` undone.

        Raises:
            ContentEncodingError: a coding is unknown or not installed, or the
                body is not what its coding says (a ``ValueError``).
        """
        if self.decoded:
            return self.body
        return decode_content(self.body, content_codings(self.headers))

    def honest_headers(self) -> list[tuple[str, str]]:
        """The response headers, without a ``content-encoding`` the body does not have."""
        if self.decoded:
            return [(k, v) for k, v in self.headers if k.lower() != "content-encoding"]
        return list(self.headers)

    def label(self) -> str:
        """Return ``"POST https://host/path?q=..."`` for messages, secrets hidden.

        Secret query values and ``user:password@`` are hidden; a malformed URI
        is shown as its method alone.
        """
        try:
            url = urllib.parse.urlsplit(self.uri)
            query = urllib.parse.parse_qsl(url.query, keep_blank_values=True)
        except ValueError:
            return f"{self.method} (a malformed URI)"
        hidden = [(k, "[REDACTED]" if secret_query_param(k) else v) for k, v in query]
        netloc = url.netloc.rpartition("@")[2]
        query_text = urllib.parse.urlencode(hidden, safe="[]")
        shown = url._replace(netloc=netloc, query=query_text).geturl()
        return f"{self.method} {shown}"


def _headers(raw: Any, where: str) -> list[tuple[str, str]]:
    if raw is None:
        return []
    if not isinstance(raw, dict):
        raise CassetteError(
            f"{where}: headers must be a mapping of name to value(s), found {_shape(raw)}"
        )
    out = []
    for name, values in raw.items():
        for value in values if isinstance(values, list) else [values]:
            out.append((str(name), str(value)))
    return out


def _shape(value: Any) -> str:
    """Describe a value in an error message: its type and a short repr."""
    text = repr(value)
    return f"{type(value).__name__} {text[:60]}{'...' if len(text) > 60 else ''}"


def _body_bytes(part: dict[str, Any], where: str) -> bytes:
    if "parsed_body" in part:
        try:
            return json.dumps(part["parsed_body"]).encode()
        except (TypeError, ValueError) as exc:
            raise CassetteError(f"{where}: parsed_body is not JSON data: {exc}") from None
    body = part.get("body", part.get("content"))
    if isinstance(body, dict):
        body = body.get("string")
    if body is None:
        return b""
    if isinstance(body, bytes):
        return body
    if isinstance(body, str):
        try:
            return body.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise CassetteError(f"{where}: the body text is not valid Unicode: {exc}") from None
    raise CassetteError(f"{where}: the body is a {type(body).__name__}, not text or bytes")


def _yaml_problem(exc: Exception) -> str:
    """One line saying where and why a YAML parser stopped."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    text = " ".join(str(problem).split())
    if mark is not None:
        return f"line {mark.line + 1}, column {mark.column + 1}: {text}"
    return text


def _part(item: dict[str, Any], name: str, where: str) -> dict[str, Any]:
    part = item.get(name)
    if not isinstance(part, dict):
        raise CassetteError(
            f"{where}: '{name}' must be a mapping, found "
            f"{'nothing' if part is None else _shape(part)}"
        )
    return part


def _yaml() -> Any:
    """Return the PyYAML module.

    Raises:
        ImportError: PyYAML is not installed (the message says what to install).
    """
    try:
        import yaml
    except ImportError:
        raise ImportError(
            "reading a YAML cassette needs PyYAML: pip install 'redrive[cassettes]' "
            "(JSON cassettes need nothing more)",
            name="yaml",
        ) from None
    return yaml


def _parse(path: Path, text: str) -> Any:
    """Parse a cassette's text: JSON with the standard library, anything else as YAML."""
    if path.suffix.lower() == ".json" or text.lstrip()[:1] in ("{", "["):
        try:
            return json.loads(text)
        except ValueError as exc:
            if path.suffix.lower() == ".json":
                raise CassetteError(f"{path}: not readable JSON: {exc}") from None
    yaml = _yaml()
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise CassetteError(f"{path}: not readable YAML: {_yaml_problem(exc)}") from None


def load_cassette(path: str | Path) -> list[Interaction]:
    """Read a cassette file (YAML or JSON) into its interactions, in order.

    A ``.json`` file, or one whose text starts with ``{``, is read as JSON with
    the standard library; any other file as YAML, with PyYAML.

    Raises:
        CassetteError: the file is not UTF-8 JSON or YAML (the message gives
            the line and column), has no non-empty ``interactions`` list, or
            an interaction is not a mapping with ``request`` and ``response``
            mappings, a text method and URI, an integer status, mapping
            headers and a text or bytes body (the message names the
            interaction and what was found).
        FileNotFoundError: there is no file at ``path``.
        ImportError: the cassette is YAML and PyYAML is not installed (the
            message says ``pip install 'redrive[cassettes]'``).
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise CassetteError(
            f"{path}: not a YAML cassette: byte {exc.start} is not UTF-8 text"
        ) from None
    except IsADirectoryError:
        raise CassetteError(f"{path}: is a directory, not a cassette file") from None
    data = _parse(path, text)
    items = data.get("interactions") if isinstance(data, dict) else None
    if items is None:
        raise CassetteError(f"{path}: no 'interactions' list; this is not a VCR cassette")
    if not isinstance(items, list) or not items:
        raise CassetteError(
            f"{path}: 'interactions' must be a non-empty list of request/response "
            f"mappings, found {_shape(items)}"
        )
    out = []
    for i, item in enumerate(items):
        where = f"{path.name} interaction {i}"
        if not isinstance(item, dict):
            raise CassetteError(
                f"{where}: expected a mapping with 'request' and 'response', found {_shape(item)}"
            )
        request = _part(item, "request", where)
        response = _part(item, "response", where)
        status = response.get("status")
        code = (
            status.get("code") if isinstance(status, dict) else response.get("status_code", status)
        )
        method, uri = request.get("method"), request.get("uri")
        if (
            not isinstance(method, str)
            or not method
            or not isinstance(uri, str)
            or not uri
            or not isinstance(code, int)
            or isinstance(code, bool)
            or not 100 <= code <= 599
        ):
            raise CassetteError(
                f"{where}: needs a text request.method and request.uri and a response status "
                "100-599 (status.code or status_code); found "
                f"method={method!r} uri={uri!r} status={code!r}"
            )
        out.append(
            Interaction(
                method=method.upper(),
                uri=uri,
                request_body=_body_bytes(request, where + " request"),
                request_headers=_headers(request.get("headers"), where + " request"),
                status=code,
                headers=_headers(response.get("headers"), where + " response"),
                body=_body_bytes(response, where + " response"),
                decoded="parsed_body" in response or "body" not in response,
            )
        )
    return out


def model_call_of(
    interaction: Interaction, provider: Provider | None = None
) -> tuple[Provider, str] | None:
    """Say whether an interaction is a model API call, and of which provider.

    Args:
        interaction: the interaction.
        provider: ``"openai"`` or ``"anthropic"``: on hosts other than
            ``api.openai.com`` / ``api.anthropic.com``, only that provider's
            path shapes (:data:`ENDPOINTS`) are model calls; None: either's.

    Returns:
        ``(provider, base path of the client's base URL)``, or None for an
        interaction that is no model call (another host and no endpoint shape).

    Raises:
        CassetteError: the URI is malformed.
    """
    try:
        url = urllib.parse.urlsplit(interaction.uri)
        host = url.hostname or ""
    except ValueError as exc:
        raise CassetteError(f"the URI {interaction.uri!r} is malformed: {exc}") from None
    if host in PROVIDERS:
        return PROVIDERS[host]
    segments = [part for part in url.path.split("/") if part]
    families: tuple[Provider, ...] = (provider,) if provider else ("anthropic", "openai")
    for start in range(len(segments)):
        for family in families:
            for shape in ENDPOINTS[family]:
                if tuple(segments[start : start + len(shape)]) == shape:
                    return family, "/" + "/".join(segments[:start])
    return None


def step_of(
    interaction: Interaction, where: str = "", provider: Provider | None = None
) -> tuple[str, dict[str, Any], Any]:
    """Return ``(step name, request, response payload)`` as a live recording would store them.

    Args:
        interaction: the interaction.
        where: how messages name it (``"c.yaml interaction 3"``).
        provider: see :func:`model_call_of`.

    Raises:
        CassetteError: the URI is malformed, the interaction is no model API
            call, the response body cannot be decoded (an unknown or
            uninstalled ``Content-Encoding``, or a body that is not what its
            encoding says: the message names the interaction, method and URL),
            or the request or response holds data a journal cannot store.
    """
    try:
        call = model_call_of(interaction, provider)
    except CassetteError as exc:
        raise CassetteError(f"{where}: {exc}") from None
    if call is None:
        raise CassetteError(
            f"{where}: {interaction.label()} is not an OpenAI or Anthropic API host "
            f"(known: {', '.join(sorted(PROVIDERS))}) and its path has no OpenAI or "
            "Anthropic endpoint shape (.../chat/completions, .../v1/messages...)"
        )
    family, base_path = call
    url = urllib.parse.urlsplit(interaction.uri)
    content_type = next(
        (v for k, v in interaction.request_headers if k.lower() == "content-type"),
        "application/json",
    )
    name, request = describe_request(
        family,
        base_path,
        interaction.method,
        url.path,
        parse_query(interaction.uri),
        interaction.request_body,
        content_type,
    )
    try:
        body = interaction.decoded_body()
    except ContentEncodingError as exc:
        raise CassetteError(
            f"{where} ({interaction.label()}): the response body cannot be decoded: {exc}"
        ) from None
    response_type = next((v for k, v in interaction.headers if k.lower() == "content-type"), "")
    if "text/event-stream" in response_type:
        events, rest = split_events(body)
        payload = response_payload(
            interaction.status, interaction.headers, chunks=events + ([rest] if rest else [])
        )
    else:
        payload = response_payload(interaction.status, interaction.headers, body=body)
    try:
        encode(request)
        encode(payload)
    except (TypeError, ValueError, OverflowError) as exc:
        raise CassetteError(f"{where}: the interaction cannot be stored: {exc}") from None
    return name, request, payload


def import_cassette(
    path: str | Path,
    journal: Journal,
    run_id: str | None = None,
    *,
    provider: Provider | None = None,
) -> str:
    """Import a cassette as a finished run whose steps replay through :func:`redrive.wrap`.

    Interactions that are no model API call (see the module docstring) are
    skipped; the run gets one note :data:`SKIPPED_NOTE` per skipped
    interaction, ``{"index", "request", "reason"}`` (``request`` is
    ``"METHOD URL"`` with secret query values hidden).

    Args:
        path: the cassette (``.yaml``, ``.yml`` or ``.json``).
        journal: where the run is written.
        run_id: the run's id (default ``"cassette:{file stem}"``).
        provider: ``"openai"`` or ``"anthropic"``: the API the cassette's
            other hosts speak (only that provider's path shapes are model
            calls there); default: each interaction's path shape says.

    Returns:
        The run id.

    Raises:
        CassetteError: the cassette cannot be read or converted (says why,
            naming the interaction: index, method and URL), holds no model
            call at all, or a run with that id already exists in the journal.
        ImportError: a YAML cassette without PyYAML installed.
        ValueError: ``provider`` is not ``"openai"``, ``"anthropic"`` or None.
    """
    if provider is not None and provider not in ENDPOINTS:
        raise ValueError(f"provider must be 'openai' or 'anthropic', not {provider!r}")
    path = Path(path)
    run_id = run_id or f"cassette:{path.stem}"
    interactions = load_cassette(path)
    plan: list[tuple[str, Any]] = []  # ("note", data) or ("step", (name, request, payload))
    for i, item in enumerate(interactions):
        where = f"{path.name} interaction {i}"
        try:
            call = model_call_of(item, provider)
        except CassetteError as exc:
            raise CassetteError(f"{where}: {exc}") from None
        if call is None:
            reason = "not a model API call (no OpenAI or Anthropic endpoint in its path)"
            plan.append(("note", {"index": i, "request": item.label(), "reason": reason}))
        else:
            plan.append(("step", step_of(item, where, provider)))
    if not any(kind == "step" for kind, _ in plan):
        first = interactions[0]
        raise CassetteError(
            f"{path}: no interaction is a model API call; interaction 0 ({first.label()}) is "
            "not an OpenAI or Anthropic API host and has no OpenAI or Anthropic endpoint "
            "path (.../chat/completions, .../responses, .../v1/messages...)"
        )
    if journal.get_run(run_id) is not None:
        raise CassetteError(
            f"{path}: run {run_id!r} already exists in {journal.url}; pass another run_id"
        )
    with Run(journal, run_id, input={"cassette": path.name}) as run:
        for kind, data in plan:
            if kind == "note":
                run.note(SKIPPED_NOTE, data)
                continue
            name, request, payload = data
            family = name.partition(":")[0]
            recorder = HttpRecorder(provider=family, view=_VIEWS.get(family))
            step = begin_model(run, name, request, ignore=recorder.ignore)
            recorder.record(step, payload)  # as a live recording
    return run_id
