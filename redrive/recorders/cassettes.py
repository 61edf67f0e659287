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

Reading is bounded (:class:`CassetteLimits`): the file's size, the nesting
depth and the number of YAML aliases are capped while parsing (a safe loader
that counts them), the size of the data once aliases are expanded is capped
before anything walks it (a "billion laughs" alias bomb, or one large string
aliased a thousand times), and every response body is decoded only up to a
per-body limit and a limit over the whole cassette (a gzip bomb). Each limit
that is hit raises :class:`CassetteError` naming the limit, its value and the
interaction (or the line of the file), before the journal is touched.

A streamed response (``text/event-stream``) of a provider whose stream grammar
ends every complete stream with a final event (OpenAI chat ``data: [DONE]``,
Responses ``response.completed``/``failed``/``incomplete``, Anthropic
``message_stop``) that lacks it was cut off while recording: it is refused
naming the interaction and the missing event, as a live stream without its
final event is not a finished step either.

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

from .._runid import check_run_id
from ..frames import encode
from ..replay import Run
from ..storage import Journal
from ._exchange import (
    MAX_DECODED_BYTES,
    ContentEncodingError,
    content_codings,
    decode_content,
    describe_request,
    parse_query,
    response_payload,
)
from ._provider import STREAM_GRAMMARS
from ._recorder import HttpRecorder
from ._secrets import secret_query_param
from ._sse import is_terminal_event, split_events
from ._step import begin_model
from .anthropic import anthropic_view
from .openai import openai_view

__all__ = [
    "CassetteError",
    "CassetteLimits",
    "Interaction",
    "PreparedCassette",
    "import_cassette",
    "load_cassette",
    "model_call_of",
    "prepare_cassette",
]

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
#: The final event each provider's stream grammar ends a complete stream with, as
#: their API references document them: OpenAI chat completions end with ``data: [DONE]``
#: and Responses with ``response.completed`` (or ``response.failed`` /
#: ``response.incomplete``); Anthropic Messages with ``event: message_stop``.
_FINAL_EVENTS: dict[str, str] = {
    "openai": "the final event (data: [DONE] for chat completions, response.completed for "
    "Responses)",
    "anthropic": "the final event (event: message_stop)",
}
#: The name of the note an import writes for each interaction it skips.
SKIPPED_NOTE = "cassette: skipped interaction"


class CassetteError(ValueError):
    """A cassette cannot be imported; the message says which file, which interaction and why.

    Attributes:
        limit: the name of the :class:`CassetteLimits` field that was exceeded
            (``"max_aliases"``...), or None when the cassette is malformed otherwise.
    """

    def __init__(self, message: str, *, limit: str | None = None) -> None:
        super().__init__(message)
        self.limit = limit


_MIB = 1024 * 1024


@attrs.frozen(kw_only=True)
class CassetteLimits:
    """How much a cassette may make the importer read, parse, expand and decode.

    The defaults admit every real cassette we know of by a wide margin and stop
    hostile ones in bounded time and memory.

    Attributes:
        max_file_bytes: the cassette file's size, in bytes (default 64 MiB).
        max_depth: how deeply collections may nest in it (default 64).
        max_aliases: how many YAML aliases (``*name``) it may use (default 10,000).
        max_expanded_bytes: the size of the parsed data with every alias expanded,
            in bytes: text and bytes lengths plus 8 per collection item (default 128 MiB).
        max_body_bytes: one response body, decoded, in bytes (default 64 MiB: the
            journal's frame limit).
        max_total_body_bytes: all response bodies together, decoded, in bytes
            (default 256 MiB).
    """

    max_file_bytes: int = 64 * _MIB
    max_depth: int = 64
    max_aliases: int = 10_000
    max_expanded_bytes: int = 128 * _MIB
    max_body_bytes: int = 64 * _MIB
    max_total_body_bytes: int = min(256 * _MIB, MAX_DECODED_BYTES)


def _over(limits: CassetteLimits, name: str, where: str, what: str) -> CassetteError:
    """The error for a limit of ``limits`` that ``where`` exceeded."""
    value = getattr(limits, name)
    return CassetteError(
        f"{where}: {what}, over the limit {name}={value}; this is not a cassette redrive "
        f"imports as it is (a hostile or damaged file?). If it is genuine, pass "
        f"limits=CassetteLimits({name}=...) to import_cassette",
        limit=name,
    )


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

    def decoded_body(self, limit: int = MAX_DECODED_BYTES) -> bytes:
        """The response body with its ``Content-Encoding`` undone.

        Args:
            limit: the most bytes the decoded body may have.

        Raises:
            ContentEncodingError: a coding is unknown or not installed, the
                body is not what its coding says, or it decodes to more than
                ``limit`` bytes (a ``ValueError``).
        """
        if self.decoded:
            if len(self.body) > limit:
                raise ContentEncodingError(f"it is {len(self.body)} bytes, over {limit}")
            return self.body
        return decode_content(self.body, content_codings(self.headers), limit=limit)

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


def _bounded_loader(yaml: Any, limits: CassetteLimits, path: Path) -> Any:
    """Return a ``yaml.SafeLoader`` subclass that caps nesting depth and alias count.

    PyYAML's safe loader builds only plain data, but follows every alias and
    nests as deep as the file does (its composer recurses: deep nesting ends in
    ``RecursionError``). This one counts both while composing, so a hostile file
    stops at the limit, with the line and column where it went over.
    """

    class BoundedLoader(yaml.SafeLoader):  # type: ignore[misc]
        def __init__(self, stream: str) -> None:
            super().__init__(stream)
            self.depth = 0
            self.aliases = 0

        def _where(self) -> str:
            mark = self.peek_event().start_mark
            return f"{path.name} line {mark.line + 1}, column {mark.column + 1}"

        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                self.aliases += 1
                if self.aliases > limits.max_aliases:
                    raise _over(limits, "max_aliases", self._where(), "one alias too many")
                return super().compose_node(parent, index)
            self.depth += 1
            try:
                if self.depth > limits.max_depth:
                    raise _over(limits, "max_depth", self._where(), "collections nest deeper")
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

    return BoundedLoader


def _parse(path: Path, text: str, limits: CassetteLimits) -> Any:
    """Parse a cassette's text: JSON with the standard library, anything else as YAML.

    Raises:
        CassetteError: unreadable, or over a parse-time limit of ``limits``.
    """
    if path.suffix.lower() == ".json" or text.lstrip()[:1] in ("{", "["):
        try:
            return json.loads(text)
        except RecursionError:
            raise _over(limits, "max_depth", path.name, "collections nest too deep") from None
        except ValueError as exc:
            if path.suffix.lower() == ".json":
                raise CassetteError(f"{path}: not readable JSON: {exc}") from None
    yaml = _yaml()
    loader = _bounded_loader(yaml, limits, path)(text)
    try:
        return loader.get_single_data()
    except RecursionError:  # pragma: no cover - max_depth stops it first at the default
        raise _over(limits, "max_depth", path.name, "collections nest too deep") from None
    except yaml.YAMLError as exc:
        raise CassetteError(f"{path}: not readable YAML: {_yaml_problem(exc)}") from None
    finally:
        loader.dispose()


def _children(item: dict[Any, Any] | list[Any] | tuple[Any, ...]) -> list[Any]:
    return [*item.keys(), *item.values()] if isinstance(item, dict) else list(item)


def _check_expanded(value: Any, limits: CassetteLimits, where: str, used: list[int]) -> None:
    """Measure ``value`` as a tree (each alias expanded) in time linear in its distinct parts.

    An alias makes the parser hand back the same object again, so the size of
    each distinct collection is computed once (by ``id``) and counted as often
    as it is referred to: a billion-laughs bomb is measured in microseconds.
    Text and bytes count their length, each collection item 8 bytes, any other
    scalar 8. No recursion.

    Args:
        value: parsed cassette data.
        limits: the bounds.
        where: how messages name the part measured (``"c.yaml interaction 3"``).
        used: ``[bytes so far]``, shared by the parts of one cassette and updated.

    Raises:
        CassetteError: the expanded data of the cassette so far is over
            ``max_expanded_bytes``, or ``value`` nests deeper than ``max_depth``
            (an alias that refers to its own collection nests forever).
    """
    measured: dict[int, tuple[int, int]] = {}  # id -> (expanded bytes, nesting height)
    open_ids: set[int] = set()  # collections whose parts are being measured

    def size(item: Any) -> tuple[int, int]:
        if isinstance(item, dict | list | tuple):
            return measured[id(item)]
        return (len(item) if isinstance(item, str | bytes) else 8), 0

    stack: list[tuple[Any, bool]] = [(value, False)]
    while stack:
        item, parts_done = stack.pop()
        if not isinstance(item, dict | list | tuple):
            continue
        key = id(item)
        if parts_done:
            total, height = 8 * len(item), 0
            for child in _children(item):
                child_bytes, child_height = size(child)
                total += child_bytes
                height = max(height, child_height)
            open_ids.discard(key)
            measured[key] = (total, height + 1)
            if height + 1 > limits.max_depth:
                raise _over(limits, "max_depth", where, "collections nest deeper (with aliases)")
            if used[0] + total > limits.max_expanded_bytes:
                raise _over(
                    limits,
                    "max_expanded_bytes",
                    where,
                    f"its data grows to {used[0] + total} bytes once YAML aliases are expanded",
                )
        elif key in open_ids:
            raise _over(limits, "max_depth", where, "a YAML alias refers to its own collection")
        elif key not in measured:
            open_ids.add(key)
            stack.append((item, True))
            stack.extend((child, False) for child in _children(item))
    used[0] += size(value)[0]


def load_cassette(path: str | Path, *, limits: CassetteLimits | None = None) -> list[Interaction]:
    """Read a cassette file (YAML or JSON) into its interactions, in order.

    A ``.json`` file, or one whose text starts with ``{``, is read as JSON with
    the standard library; any other file as YAML, with PyYAML's safe loader
    bounded by ``limits`` (see the module docstring).

    Args:
        path: the cassette file.
        limits: the bounds (default :class:`CassetteLimits`).

    Raises:
        CassetteError: the file is over a limit of ``limits`` (its ``limit``
            attribute names which; the message names the interaction, or the
            line and column).
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
    limits = limits or CassetteLimits()
    try:
        size = path.stat().st_size
    except IsADirectoryError:  # pragma: no cover - stat() of a directory succeeds
        size = 0
    if size > limits.max_file_bytes:
        raise _over(limits, "max_file_bytes", str(path), f"the file is {size} bytes")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise CassetteError(
            f"{path}: not a YAML cassette: byte {exc.start} is not UTF-8 text"
        ) from None
    except IsADirectoryError:
        raise CassetteError(f"{path}: is a directory, not a cassette file") from None
    data = _parse(path, text, limits)
    used = [0]
    if isinstance(data, dict):
        for key, value in data.items():
            if key != "interactions" or not isinstance(value, list):
                _check_expanded({key: value}, limits, f"{path.name} top-level {key!r}", used)
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
        _check_expanded(item, limits, where, used)
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
    interaction: Interaction,
    where: str = "",
    provider: Provider | None = None,
    *,
    limits: CassetteLimits | None = None,
    used: list[int] | None = None,
) -> tuple[str, dict[str, Any], Any]:
    """Return ``(step name, request, response payload)`` as a live recording would store them.

    Args:
        interaction: the interaction.
        where: how messages name it (``"c.yaml interaction 3"``).
        provider: see :func:`model_call_of`.
        limits: the bounds on decoded bodies (default :class:`CassetteLimits`).
        used: ``[decoded body bytes so far]`` of the cassette, updated (default: this
            interaction alone).

    Raises:
        CassetteError: the URI is malformed, the interaction is no model API
            call, the response body cannot be decoded (an unknown or
            uninstalled ``Content-Encoding``, or a body that is not what its
            encoding says: the message names the interaction, method and URL),
            or the request or response holds data a journal cannot store; its
            body decodes past ``max_body_bytes`` or the cassette's past
            ``max_total_body_bytes``; or it is a stream of a provider whose
            streams end with a final event and that event is missing.
    """
    limits = limits or CassetteLimits()
    used = [0] if used is None else used
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
    room = min(limits.max_body_bytes, limits.max_total_body_bytes - used[0])
    try:
        body = interaction.decoded_body(limit=max(room, 0))
    except ContentEncodingError as exc:
        if "over" in str(exc) or "more than" in str(exc):
            name = "max_body_bytes" if room == limits.max_body_bytes else "max_total_body_bytes"
            raise _over(
                limits, name, f"{where} ({interaction.label()})", "its response body decodes"
            ) from None
        raise CassetteError(
            f"{where} ({interaction.label()}): the response body cannot be decoded: {exc}"
        ) from None
    used[0] += len(body)
    response_type = next((v for k, v in interaction.headers if k.lower() == "content-type"), "")
    if "text/event-stream" in response_type:
        events, rest = split_events(body)
        if (
            family in STREAM_GRAMMARS
            and 200 <= interaction.status < 300
            and not any(is_terminal_event(event) for event in events + ([rest] if rest else []))
        ):
            raise CassetteError(
                f"{where} ({interaction.label()}): the response stream has no final event "
                f"(it was cut off while recording): {_FINAL_EVENTS[family]} is missing after "
                f"its {len(events)} events. A stream without it is not a finished model "
                "call; record this call again, or remove the interaction from the cassette"
            )
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


@attrs.frozen(kw_only=True)
class PreparedCassette:
    """A cassette read, checked and converted, not yet written (:func:`prepare_cassette`).

    Attributes:
        path: the cassette file.
        plan: in order, ``("note", data)`` for a skipped interaction and
            ``("step", (name, request, response payload))`` for a model call.
    """

    path: Path
    plan: tuple[tuple[str, Any], ...]


def prepare_cassette(
    path: str | Path,
    *,
    provider: Provider | None = None,
    limits: CassetteLimits | None = None,
) -> PreparedCassette:
    """Read, bound-check and convert a cassette without touching any journal.

    Everything that can go wrong with the file goes wrong here, so a command
    can read the cassette before it opens a journal (an error, even running out
    of memory, is then never mistaken for the journal's).

    Args:
        path: the cassette (``.yaml``, ``.yml`` or ``.json``).
        provider: see :func:`import_cassette`.
        limits: the bounds (default :class:`CassetteLimits`).

    Returns:
        The :class:`PreparedCassette`, for :func:`import_cassette`.

    Raises:
        CassetteError, ImportError, ValueError, FileNotFoundError: as
            :func:`import_cassette` (except the run-exists case).
    """
    if provider is not None and provider not in ENDPOINTS:
        raise ValueError(f"provider must be 'openai' or 'anthropic', not {provider!r}")
    path = Path(path)
    limits = limits or CassetteLimits()
    interactions = load_cassette(path, limits=limits)
    plan: list[tuple[str, Any]] = []  # ("note", data) or ("step", (name, request, payload))
    used = [0]
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
            plan.append(("step", step_of(item, where, provider, limits=limits, used=used)))
    if not any(kind == "step" for kind, _ in plan):
        first = interactions[0]
        raise CassetteError(
            f"{path}: no interaction is a model API call; interaction 0 ({first.label()}) is "
            "not an OpenAI or Anthropic API host and has no OpenAI or Anthropic endpoint "
            "path (.../chat/completions, .../responses, .../v1/messages...)"
        )
    return PreparedCassette(path=path, plan=tuple(plan))


def import_cassette(
    path: str | Path | PreparedCassette,
    journal: Journal,
    run_id: str | None = None,
    *,
    provider: Provider | None = None,
    limits: CassetteLimits | None = None,
) -> str:
    """Import a cassette as a finished run whose steps replay through :func:`redrive.wrap`.

    Interactions that are no model API call (see the module docstring) are
    skipped; the run gets one note :data:`SKIPPED_NOTE` per skipped
    interaction, ``{"index", "request", "reason"}`` (``request`` is
    ``"METHOD URL"`` with secret query values hidden).

    Args:
        path: the cassette (``.yaml``, ``.yml`` or ``.json``), or one already
            read by :func:`prepare_cassette` (``provider`` and ``limits`` are then
            not used again).
        journal: where the run is written.
        run_id: the run's id (default ``"cassette:{file stem}"``).
        provider: ``"openai"`` or ``"anthropic"``: the API the cassette's
            other hosts speak (only that provider's path shapes are model
            calls there); default: each interaction's path shape says.
        limits: how much the cassette may make the importer read, expand and
            decode (default :class:`CassetteLimits`).

    Returns:
        The run id.

    Raises:
        CassetteError: the cassette cannot be read or converted (says why,
            naming the interaction: index, method and URL), holds no model
            call at all, is over a limit of ``limits`` (``CassetteError.limit``
            names it), holds a stream cut off before its final event, or a run
            with that id already exists in the journal. Nothing is written.
        ImportError: a YAML cassette without PyYAML installed.
        ValueError: ``provider`` is not ``"openai"``, ``"anthropic"`` or None, or
            ``run_id`` breaks the run-id rule (NUL, lone surrogate, too long).
    """
    prepared = (
        path
        if isinstance(path, PreparedCassette)
        else prepare_cassette(path, provider=provider, limits=limits)
    )
    path, plan = prepared.path, prepared.plan
    run_id = run_id or f"cassette:{path.stem}"
    if journal.get_run(check_run_id(run_id)) is not None:
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
