"""Import VCR-style YAML cassettes of OpenAI / Anthropic traffic into a journal as a run.

Three on-disk dialects are read:

* classic vcrpy: ``response: {status: {code, message}, headers, body: {string}}``
  (the string may be ``!!binary`` gzip with ``Content-Encoding: gzip``);
* pydantic-ai's serializer: JSON bodies stored decoded under ``parsed_body``
  (request and response), non-JSON bodies under ``body.string``;
* vcrpy's older httpx stub: ``response: {status_code, http_version, content}``.

Each interaction becomes one model step, stored exactly as
:func:`redrive.wrap` would have recorded it live (decoded body, scrubbed
headers, SSE events as chunks), so the run replays through the real SDK.
"""

from __future__ import annotations

import gzip
import json
import urllib.parse
import zlib
from pathlib import Path
from typing import Any

import attrs

from ..frames import encode
from ..replay import Run
from ..storage import Journal
from ._exchange import describe_request, parse_query, response_payload
from ._recorder import HttpRecorder
from ._sse import split_events
from ._step import begin_model
from .anthropic import anthropic_view
from .openai import openai_view

__all__ = ["CassetteError", "Interaction", "import_cassette", "load_cassette"]

#: host -> (provider, base path the SDK's default base URL has).
PROVIDERS = {
    "api.openai.com": ("openai", "/v1"),
    "api.anthropic.com": ("anthropic", ""),
}
_VIEWS = {"openai": openai_view, "anthropic": anthropic_view}


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
        body: the response body bytes as recorded (possibly gzip-compressed).
    """

    method: str
    uri: str
    request_body: bytes
    request_headers: list[tuple[str, str]]
    status: int
    headers: list[tuple[str, str]]
    body: bytes

    def decoded_body(self) -> bytes:
        """The response body with any gzip/deflate compression removed."""
        return _decode(self.body)

    def honest_headers(self) -> list[tuple[str, str]]:
        """The response headers, without a ``content-encoding`` the body does not have."""
        if self.body == self.decoded_body():
            return [(k, v) for k, v in self.headers if k.lower() != "content-encoding"]
        return list(self.headers)


def _decode(data: bytes) -> bytes:
    if data[:2] == b"\x1f\x8b":
        return gzip.decompress(data)
    if data[:1] == b"\x78":  # zlib (deflate) header
        try:
            return zlib.decompress(data)
        except zlib.error:
            return data
    return data


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


def load_cassette(path: str | Path) -> list[Interaction]:
    """Read a cassette file into its interactions, in order.

    Raises:
        CassetteError: the file is not UTF-8 YAML (the message gives the line and
            column), has no non-empty ``interactions`` list, or an interaction is
            not a mapping with ``request`` and ``response`` mappings, a text
            method and URI, an integer status, mapping headers and a text or
            bytes body (the message names the interaction and what was found).
        FileNotFoundError: there is no file at ``path``.
        ImportError: PyYAML is not installed (``pip install pyyaml``).
    """
    import yaml

    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise CassetteError(
            f"{path}: not a YAML cassette: byte {exc.start} is not UTF-8 text"
        ) from None
    except IsADirectoryError:
        raise CassetteError(f"{path}: is a directory, not a cassette file") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise CassetteError(f"{path}: not readable YAML: {_yaml_problem(exc)}") from None
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
            )
        )
    return out


def step_of(interaction: Interaction, where: str = "") -> tuple[str, dict[str, Any], Any]:
    """Return ``(step name, request, response payload)`` as a live recording would store them.

    Raises:
        CassetteError: the URI is malformed, the host is not a known model API,
            the response body cannot be decompressed, or the request or
            response holds data a journal cannot store.
    """
    try:
        url = urllib.parse.urlsplit(interaction.uri)
        host = url.hostname or ""
    except ValueError as exc:
        raise CassetteError(f"{where}: the URI {interaction.uri!r} is malformed: {exc}") from None
    if host not in PROVIDERS:
        raise CassetteError(
            f"{where}: {interaction.uri} is not an OpenAI or Anthropic API host "
            f"(known: {', '.join(sorted(PROVIDERS))})"
        )
    provider, base_path = PROVIDERS[host]
    content_type = next(
        (v for k, v in interaction.request_headers if k.lower() == "content-type"),
        "application/json",
    )
    name, request = describe_request(
        provider,
        base_path,
        interaction.method,
        url.path,
        parse_query(interaction.uri),
        interaction.request_body,
        content_type,
    )
    try:
        body = interaction.decoded_body()
    except (OSError, EOFError, zlib.error) as exc:
        raise CassetteError(f"{where}: the response body cannot be decompressed: {exc}") from None
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


def import_cassette(path: str | Path, journal: Journal, run_id: str | None = None) -> str:
    """Import a cassette as a finished run whose steps replay through :func:`redrive.wrap`.

    Args:
        path: the cassette (``.yaml``).
        journal: where the run is written.
        run_id: the run's id (default ``"cassette:{file stem}"``).

    Returns:
        The run id.

    Raises:
        CassetteError: the cassette cannot be read or converted (says why), or
            a run with that id already exists in the journal.
    """
    path = Path(path)
    run_id = run_id or f"cassette:{path.stem}"
    interactions = load_cassette(path)
    steps = [step_of(item, f"{path.name} interaction {i}") for i, item in enumerate(interactions)]
    if journal.get_run(run_id) is not None:
        raise CassetteError(
            f"{path}: run {run_id!r} already exists in {journal.url}; pass another run_id"
        )
    with Run(journal, run_id, input={"cassette": path.name}) as run:
        for name, request, payload in steps:
            provider = name.partition(":")[0]
            recorder = HttpRecorder(provider=provider, view=_VIEWS.get(provider))
            step = begin_model(run, name, request, ignore=recorder.ignore)
            recorder.record(step, payload)  # as a live recording
    return run_id
