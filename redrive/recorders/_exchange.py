"""The stored form of an HTTP exchange: the model step's request and response payload.

A request is stored as ``{method, path, query, body}`` (no headers; the path
the endpoint called, see :mod:`redrive.recorders._endpoints`, else relative to
the client's base URL; the JSON body parsed; secret query values
``[REDACTED]``). A response is stored as::

    {"status": 200, "headers": [[name, value], ...], "stream": False,
     "body": "<decoded text>" | b"<bytes>" | None, "chunks": ["event: ...\\n\\n", ...] | None}

plus ``"partial": True`` for a stream the caller closed early, and
``"content_encoding": "gzip"`` for a body that came encoded (stored decoded;
a replay encodes it again, see :mod:`redrive.recorders._reencode`). The live
recorder and the cassette importer both build it here, so an imported
cassette replays exactly as a live recording does.
"""

from __future__ import annotations

import importlib
import urllib.parse
import zlib
from collections.abc import Iterable
from typing import Any

from .._jsontext import NOT_JSON, loads
from ._endpoints import endpoint_path
from ._secrets import scrub_headers, secret_query_param

__all__ = [
    "MAX_DECODED_BYTES",
    "ContentEncodingError",
    "as_bytes",
    "content_codings",
    "decodable_codings",
    "decode_content",
    "describe_request",
    "parse_query",
    "replay_headers",
    "response_payload",
    "text_or_bytes",
]


def text_or_bytes(data: bytes) -> str | bytes:
    """Return ``data`` as text when it is UTF-8, else the bytes themselves."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data


def as_bytes(data: Any) -> bytes:
    """Return stored text or bytes as bytes (UTF-8); anything else (None) as ``b""``."""
    if isinstance(data, bytes):
        return data
    if isinstance(data, str):
        return data.encode("utf-8")
    return b""


def _parse_body(content: bytes, content_type: str) -> Any:
    if not content:
        return None
    if "multipart/" in content_type:
        boundary = content_type.partition("boundary=")[2].strip('"').encode()
        if boundary:
            content = content.replace(boundary, b"redrive-boundary")
        return {"content_type": "multipart/form-data", "data": content}
    # JSON of any shape is the body as parsed; what is not JSON, or nests deeper than a
    # journal stores, is kept as opaque text (matched by its bytes)
    body = loads(content)
    if body is NOT_JSON:
        return {"content_type": content_type, "data": text_or_bytes(content)}
    return body


def describe_request(
    provider: str,
    base_path: str,
    method: str,
    path: str,
    query: Iterable[tuple[str, str]],
    content: bytes,
    content_type: str,
    *,
    family: str | None = None,
) -> tuple[str, dict[str, Any]]:
    """Build a model step's ``(name, request)`` from the parts of an HTTP request.

    The stored path is the endpoint the request calls
    (:func:`~redrive.recorders._endpoints.endpoint_path`: ``/chat/completions``
    whether the client's base URL ends in ``/v1``, ``/v1beta/openai`` or
    ``/openai``, or the client has none); a path that calls no endpoint of the
    family is relative to the client's base URL.

    Args:
        provider: ``"openai"``, ``"anthropic"``... (the label in the step name).
        base_path: the path of the client's base URL (``"/v1"``); stripped from ``path``.
        method: the HTTP method.
        path: the request path (with ``base_path``).
        query: the query parameters, in order.
        content: the request body.
        content_type: the body's ``content-type`` header.
        family: the API family whose endpoints the path is read for
            (``"openai"``, ``"anthropic"``); default ``provider``.

    Returns:
        ``("openai:POST /chat/completions", {"method", "path", "query", "body"})``;
        the body is the parsed JSON (or ``{"content_type", "data"}`` for other
        bodies); secret query parameters are ``[REDACTED]``.
    """
    endpoint = endpoint_path(family or provider, path, base_path)
    base = base_path.rstrip("/")
    if endpoint is not None:
        path = endpoint
    elif base and (path == base or path.startswith(base + "/")):
        path = path[len(base) :] or "/"
    params: dict[str, Any] = {}
    for key, value in query:
        value = "[REDACTED]" if secret_query_param(key) else value
        if key in params:
            prior = params[key]
            params[key] = [*prior, value] if isinstance(prior, list) else [prior, value]
        else:
            params[key] = value
    method = method.upper()
    request = {
        "method": method,
        "path": path,
        "query": params,
        "body": _parse_body(content, content_type),
    }
    return f"{provider}:{method} {path}", request


def response_payload(
    status: int,
    headers: Iterable[tuple[str, str]],
    *,
    body: bytes | None = None,
    chunks: list[bytes] | None = None,
    partial: bool = False,
    content_encoding: str | None = None,
) -> dict[str, Any]:
    """Build the stored form of a response (see the module docstring).

    Args:
        status: the HTTP status.
        headers: the response headers as received (scrubbed here).
        body: the decoded body (no content-encoding) of a response that is not a stream.
        chunks: the events of a server-sent-event stream, as received.
        partial: a stream the caller closed early (adds ``"partial": True``).
        content_encoding: the ``Content-Encoding`` the body came with (``"gzip"``),
            kept as ``"content_encoding"`` so a replay encodes the body again
            (:mod:`redrive.recorders._reencode`); None: no coding, no key.

    Returns:
        The payload dict of a ``model_response`` frame's ``response``.
    """
    stream = chunks is not None
    payload: dict[str, Any] = {
        "status": int(status),
        "headers": scrub_headers(headers),
        "stream": stream,
        "body": None if stream or body is None else text_or_bytes(body),
        "chunks": [text_or_bytes(c) for c in chunks] if chunks is not None else None,
    }
    if partial:
        payload["partial"] = True
    if content_encoding:
        payload["content_encoding"] = content_encoding
    return payload


def replay_headers(payload: dict[str, Any]) -> list[tuple[str, str]]:
    """Return the headers a replayed response carries.

    The stored ones, and for an error ``x-should-retry: false`` (the SDK
    raises a recorded error at once, without retrying).
    """
    headers = [(str(k), str(v)) for k, v in payload.get("headers") or []]
    if int(payload["status"]) >= 400:
        headers = [(k, v) for k, v in headers if k != "x-should-retry"]
        headers.append(("x-should-retry", "false"))
    return headers


def parse_query(url: str) -> list[tuple[str, str]]:
    """Return the query pairs of a URL string (used by cassette import), blanks kept."""
    return urllib.parse.parse_qsl(urllib.parse.urlsplit(url).query, keep_blank_values=True)


#: The most bytes one decoded body may have (a hostile cassette cannot exhaust memory).
MAX_DECODED_BYTES = 256 * 1024 * 1024


class ContentEncodingError(ValueError):
    """A body cannot be decoded: an unknown coding, or data that is not what it claims."""


def content_codings(headers: Iterable[tuple[str, str]]) -> list[str]:
    """Return the content codings of a response, in the order they were applied.

    Args:
        headers: ``[(name, value), ...]``; every ``Content-Encoding`` header counts,
            each a comma-separated list (``"gzip, br"``).

    Returns:
        The codings, lower-case, without ``identity`` (``["gzip", "br"]``).
    """
    out: list[str] = []
    for name, value in headers:
        if name.lower() == "content-encoding":
            out.extend(c.strip().lower() for c in value.split(","))
    return [c for c in out if c and c != "identity"]


def _inflate(data: bytes, wbits: int, limit: int = MAX_DECODED_BYTES) -> bytes:
    """Decompress zlib/gzip/raw-deflate data (every gzip member), at most ``limit`` bytes."""
    gzip = wbits == zlib.MAX_WBITS | 16
    out = bytearray()
    while True:
        d = zlib.decompressobj(wbits)
        out += d.decompress(data, limit + 1 - len(out))
        if len(out) > limit or d.unconsumed_tail:
            raise ContentEncodingError(f"it decodes to more than {limit} bytes (the limit)")
        if not d.eof:
            raise ContentEncodingError("the compressed data is truncated")
        data = d.unused_data
        if not data or (gzip and not data.strip(b"\0")):  # gzip tolerates zero padding
            return bytes(out)
        if not gzip:
            raise ContentEncodingError(f"{len(data)} bytes follow the compressed data")


def _gzip(data: bytes, limit: int) -> bytes:
    return _inflate(data, zlib.MAX_WBITS | 16, limit)


def _deflate(data: bytes, limit: int) -> bytes:
    try:  # zlib-wrapped, as RFC 9110 says; raw deflate as some servers send (httpx reads both)
        return _inflate(data, zlib.MAX_WBITS, limit)
    except zlib.error:
        return _inflate(data, -zlib.MAX_WBITS, limit)


def _brotli() -> Any:
    for name in ("brotli", "brotlicffi"):
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    return None


def _br(data: bytes, limit: int) -> bytes:
    module = _brotli()
    if module is None:
        raise ContentEncodingError("no brotli decoder is installed (pip install brotli)")
    try:
        decompressor = module.Decompressor()
        out = bytearray()
        if hasattr(decompressor, "can_accept_more_data"):
            # brotli >= 1.1: output in bounded pieces (pending output is drained with b"")
            out += decompressor.process(data, output_buffer_limit=limit + 1)
            while len(out) <= limit and not decompressor.can_accept_more_data():
                out += decompressor.process(b"", output_buffer_limit=limit + 1 - len(out))
        else:
            step = getattr(decompressor, "process", None) or decompressor.decompress
            for start in range(0, len(data), 1024):  # fed in pieces: a bomb stops at the limit
                out += step(data[start : start + 1024])
                if len(out) > limit:
                    break
        if len(out) > limit:
            raise ContentEncodingError(f"it decodes to more than {limit} bytes (the limit)")
        finished = getattr(decompressor, "is_finished", None)  # brotli
        if finished is not None and not finished():
            raise ContentEncodingError("the brotli data is truncated")
        if finished is None and hasattr(decompressor, "finish"):  # brotlicffi
            decompressor.finish()  # raises on truncated data
    except ContentEncodingError:
        raise
    except Exception as exc:  # brotli.error / brotlicffi.error
        raise ContentEncodingError(f"not brotli data ({exc})") from None
    return bytes(out)


def _zstd(data: bytes, limit: int) -> bytes:
    out = _zstd_all(data)
    if len(out) > limit:
        raise ContentEncodingError(f"it decodes to more than {limit} bytes (the limit)")
    return out


def _zstd_all(data: bytes) -> bytes:
    for name in ("compression.zstd", "backports.zstd"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        try:
            return bytes(module.decompress(data))
        except Exception as exc:  # ZstdError
            raise ContentEncodingError(f"not zstd data ({exc})") from None
    try:
        zstandard = importlib.import_module("zstandard")
    except ImportError:
        raise ContentEncodingError("no zstd decoder is installed (pip install zstandard)") from None
    try:
        reader = zstandard.ZstdDecompressor().decompressobj()
        return bytes(reader.decompress(data))
    except Exception as exc:  # zstandard.ZstdError
        raise ContentEncodingError(f"not zstd data ({exc})") from None


_DECODERS = {"gzip": _gzip, "deflate": _deflate, "br": _br, "zstd": _zstd}


def decodable_codings() -> frozenset[str]:
    """Return the content codings :func:`decode_content` can decode here.

    ``gzip`` and ``deflate`` always; ``br`` with ``brotli`` or ``brotlicffi``
    installed; ``zstd`` with ``zstandard`` (or Python 3.14's
    ``compression.zstd``, or ``backports.zstd``) installed: the set httpx decodes.
    """
    found = {"identity", "gzip", "deflate"}
    if _brotli() is not None:
        found.add("br")
    for name in ("compression.zstd", "backports.zstd", "zstandard"):
        try:
            importlib.import_module(name)
        except ImportError:
            continue
        found.add("zstd")
        break
    return frozenset(found)


def decode_content(data: bytes, codings: Iterable[str], *, limit: int = MAX_DECODED_BYTES) -> bytes:
    """Undo the content codings of a body, the last applied first (as httpx does).

    Args:
        data: the body as sent on the wire.
        codings: the codings in the order they were applied (:func:`content_codings`).
        limit: the most bytes the decoded body may have (gzip, deflate and brotli stop
            decoding there, so a decompression bomb costs at most ``limit`` bytes).

    Returns:
        The decoded body (at most ``limit`` bytes).

    Raises:
        ContentEncodingError: a coding is not one of :func:`decodable_codings`
            (the message says what to install, where that helps), or the data
            is not what the coding says (``gzip`` over ``b"not gzip"``), is
            truncated, or decodes to more than ``limit`` bytes.
    """
    for coding in reversed(list(codings)):
        coding = coding.strip().lower()
        if coding in ("", "identity"):
            continue
        decoder = _DECODERS.get(coding)
        if decoder is None:
            raise ContentEncodingError(
                f"Content-Encoding {coding!r} is not one httpx decodes "
                "(identity, gzip, deflate, br, zstd)"
            )
        try:
            data = decoder(data, limit)
        except zlib.error as exc:
            raise ContentEncodingError(f"the body is not {coding} data ({exc})") from None
        except ContentEncodingError as exc:
            raise ContentEncodingError(f"Content-Encoding {coding}: {exc}") from None
    return data
