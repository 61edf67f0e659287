"""Content codings on the way back: a stored (decoded) body as the wire carried it.

A journal stores a response body decoded (readable, scrubbed) and, beside it,
the ``Content-Encoding`` it came with (``"content_encoding"`` in the stored
payload, RFC 9110 section 8.4). A replayed response carries that header again
and a body encoded with those codings, so httpx treats it as it treated the
live one: ``iter_raw`` gives encoded bytes, ``read``/``iter_bytes``/
``iter_text``/``iter_lines`` decoded ones. The encoded bytes decode to the
recorded body; they are not the server's bytes themselves (compressors differ
in their output for the same input, and a scrubbed body was changed anyway).
"""

from __future__ import annotations

import gzip
import importlib
import zlib
from collections.abc import Callable, Iterable
from typing import Any

from ._exchange import content_codings, decodable_codings

__all__ = ["codings_httpx_decodes", "encode_content", "stored_codings"]


def _brotli(data: bytes) -> bytes:
    for name in ("brotli", "brotlicffi"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        return bytes(module.compress(data))
    raise LookupError("br")


def _zstd(data: bytes) -> bytes:
    for name in ("compression.zstd", "backports.zstd"):
        try:
            return bytes(importlib.import_module(name).compress(data))
        except ImportError:
            continue
    try:
        zstandard = importlib.import_module("zstandard")
    except ImportError:
        raise LookupError("zstd") from None
    return bytes(zstandard.ZstdCompressor().compress(data))


_ENCODERS: dict[str, Callable[[bytes], bytes]] = {
    "gzip": lambda data: gzip.compress(data, mtime=0),
    "deflate": zlib.compress,  # zlib-wrapped, as RFC 9110 section 8.4.1.2 says
    "br": _brotli,
    "zstd": _zstd,
}


def codings_httpx_decodes(httpx: Any) -> frozenset[str]:
    """The content codings the httpx module ``httpx`` decodes (its ``SUPPORTED_DECODERS``).

    Falls back to :func:`~redrive.recorders._exchange.decodable_codings` for an
    httpx that does not expose that table.
    """
    table = getattr(getattr(httpx, "_decoders", None), "SUPPORTED_DECODERS", None)
    if isinstance(table, dict):
        return frozenset(str(name) for name in table)
    return decodable_codings()


def stored_codings(headers: Iterable[tuple[str, str]]) -> str | None:
    """The ``Content-Encoding`` a stored payload keeps (``"gzip"``, ``"deflate, gzip"``), or None.

    Args:
        headers: the response headers as received.

    Returns:
        The codings in the order they were applied, comma-separated, lower-case;
        None when there are none (or only ``identity``).
    """
    codings = content_codings(headers)
    return ", ".join(codings) if codings else None


def encode_content(data: bytes, codings: str, httpx: Any) -> bytes | None:
    """Encode a decoded body with the codings httpx would undo, in the order they were applied.

    Args:
        data: the decoded body (as stored).
        codings: the stored ``Content-Encoding`` (:func:`stored_codings`).
        httpx: the httpx module the response is for: a coding it does not
            decode was not decoded when recorded either (the stored body still
            has it), so it is not applied again.

    Returns:
        The body as the wire carries it under ``Content-Encoding: codings``;
        None when a coding httpx decodes has no encoder installed here (brotli,
        zstandard): then the caller hands the body decoded, without the header.
    """
    decodes = codings_httpx_decodes(httpx)
    for coding in content_codings([("content-encoding", codings)]):
        if coding not in decodes:
            continue
        encoder = _ENCODERS.get(coding)
        if encoder is None:
            return None
        try:
            data = encoder(data)
        except LookupError:
            return None
    return data
