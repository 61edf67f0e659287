"""Reading a cassette file into its interactions, within bounds (:func:`load_cassette`).

The dialects, the limits and their errors are described in
:mod:`redrive.recorders.cassettes`, which re-exports these names.
"""

from __future__ import annotations

import json
import urllib.parse
from pathlib import Path
from typing import Any

import attrs

from ._exchange import (
    MAX_DECODED_BYTES,
    ContentEncodingError,
    content_codings,
    decode_content,
)
from ._secrets import secret_query_param


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
