"""Masking secret-looking text: the rules of :func:`redrive._scrub.mask_text`, and their cache.

Point 3 of :mod:`redrive._scrub` (secret query and form parameters, URL
passwords, credential header lines and fields inside text, ``Bearer`` tokens,
keys of a well-known shape). Pure, so a text's masked copy is cached.
"""

from __future__ import annotations

import collections
import re
import threading

import xxhash

from ._credentials import FIELD, HEADER, QUERY, REDACTED, _fold, credential_name

_NAME = r"[A-Za-z][A-Za-z0-9_.\-]{0,63}"
_SHAPES = (
    r"\bsk-[A-Za-z0-9_\-]{20,}",
    r"\bsk_(?:live|test)_[A-Za-z0-9]{16,}",
    r"\bgh[pousr]_[A-Za-z0-9]{20,}",
    r"\bgithub_pat_[A-Za-z0-9_]{20,}",
    r"\bglpat-[A-Za-z0-9_\-]{20,}",
    r"\bxox[abposr]-[A-Za-z0-9\-]{10,}",
    r"\bAKIA[0-9A-Z]{16}\b",
    r"\bAIza[0-9A-Za-z_\-]{35}",
    r"\bhf_[A-Za-z0-9]{30,}",
    r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]*",
)
#: a query or form parameter: ?name=value, &name=value, or name=value at the start of a word
_PARAM = re.compile(
    rf"(?P<lead>(?:(?<=[?&;])|(?<![^\s(\[{{,]))(?P<name>{_NAME})=)(?P<value>[^&#\s\"'<>\\]+)"
)
#: the password of a URL's user info
_USERINFO = re.compile(
    r"[A-Za-z][A-Za-z0-9+.\-]*://(?:[^\s/:@\"']+:(?P<value>[^\s/@\"']+)|(?P<user>[^\s/:@\"']+))@"
)
#: Bearer <token> (a token holds a digit)
_BEARER = re.compile(
    r"(?P<lead>\bbearer\s+)(?=[A-Za-z0-9\-._~+/]*\d)[A-Za-z0-9\-._~+/]{8,}=*", re.IGNORECASE
)
_SHAPE = re.compile("|".join(_SHAPES))
#: Text without one of these holds no key of a well-known shape (a cheap test first).
_SHAPE_SIGNS = (
    "sk-",
    "sk_",
    "ghp_",
    "gho_",
    "ghu_",
    "ghs_",
    "ghr_",
    "github_pat_",
    "glpat-",
    "xox",
    "AKIA",
    "AIza",
    "hf_",
    "eyJ",
)
#: Every key shape above needs one of these characters (``-`` or ``_``, ``xox..-`` too;
#: ``AKIA`` and ``AIza`` an ``A``; ``eyJ`` a ``J``): a text without any holds no key of a
#: shape, told by one fast character search each before a substring search per sign.
_SIGN_CHARS = ("-", "_", "A", "J")
#: "name": "value" (JSON) and 'name': 'value' (a Python repr) in text; or "name": [ and
#: "name": { (an array or object, ``open``: masked whole by parsing, see ``mask_scan``)
_FIELD_TEXT = re.compile(
    rf"(?P<q>[\"'])(?P<name>{_NAME})(?P=q)\s*:\s*"
    r"""(?:(?P<value>"[^"\\]*(?:\\.[^"\\]*)*"|'[^'\\]*(?:\\.[^'\\]*)*')|(?P<open>[\[{]))"""
)
#: what closes an array or object that holds nothing
_EMPTY = re.compile(r"\s*[\]}]")
#: \"name\": \"value\": JSON text inside a JSON string (a tool call's ``arguments``)
_ESCAPED_FIELD_TEXT = re.compile(
    rf'\\"(?P<name>{_NAME})\\"\s*:\s*\\"(?P<value>(?:[^"\\]|\\\\)*)\\"'
)
#: a header line: ``name: value``
_HEADER_LINE = re.compile(
    rf"^(?P<lead>[ \t]*(?P<name>{_NAME})[ \t]*:[ \t]*)(?P<value>[^\r\n]+)", re.MULTILINE
)


Span = tuple[int, int]


class _Spans:
    """Finds the spans the text rules replace; ``names`` are more field names to mask (folded)."""

    def __init__(self, names: frozenset[str] = frozenset()) -> None:
        self.names = names

    def _secret(self, name: str, form: str) -> bool:
        return credential_name(name, form) or (bool(self.names) and _fold(name) in self.names)

    def find(self, text: str) -> list[Span]:
        """Return the sorted, merged ``(start, end)`` spans of ``text`` to replace."""
        return self.scan(text)[0]

    def scan(self, text: str) -> tuple[list[Span], bool]:
        """Return :meth:`find`'s spans, and whether a credential field holds a container.

        The flag is True when some credential field in ``text`` holds a non-empty array
        or object, which no span covers (see :func:`mask_scan`).
        """
        spans: list[Span] = []
        add = spans.append
        container = False
        # each rule runs only where its sign is in the text: most text has none
        if ":" in text:
            if '"' in text or "'" in text:
                for m in _FIELD_TEXT.finditer(text):
                    if m["open"] is None:
                        if self._secret(m["name"], FIELD):
                            add((m.start("value") + 1, m.end("value") - 1))
                    elif credential_name(m["name"], FIELD) and not _EMPTY.match(text, m.end()):
                        # the names of the tree rule only (redrive._scrub masks those whole)
                        container = True
                if '\\"' in text:
                    for m in _ESCAPED_FIELD_TEXT.finditer(text):
                        if self._secret(m["name"], FIELD):
                            add(m.span("value"))
            for m in _HEADER_LINE.finditer(text):
                if self._secret(m["name"], HEADER):
                    add(m.span("value"))
            if "://" in text:
                for m in _USERINFO.finditer(text):
                    add(m.span("value") if m["value"] is not None else m.span("user"))
        if "=" in text:
            for m in _PARAM.finditer(text):
                if self._secret(m["name"], QUERY):
                    add(m.span("value"))
        if "earer" in text or "EARER" in text:
            for m in _BEARER.finditer(text):
                add((m.end("lead"), m.end()))
        if any(c in text for c in _SIGN_CHARS) and any(sign in text for sign in _SHAPE_SIGNS):
            for m in _SHAPE.finditer(text):
                add(m.span())
        return (_merge(spans) if spans else spans), container


def _merge(spans: list[Span]) -> list[Span]:
    """Sort spans and join those that overlap (an empty span inside another is absorbed)."""
    spans.sort()
    out = [spans[0]]
    for start, end in spans[1:]:
        last_start, last_end = out[-1]
        if start < last_end or start == last_start:
            out[-1] = (last_start, max(last_end, end))
        else:
            out.append((start, end))
    return out


def _owner(bounds: list[Span], start: int) -> int:
    """The index of the piece holding offset ``start`` (the last piece for the very end)."""
    for index, (lo, hi) in enumerate(bounds):
        if lo <= start < hi:
            return index
    return len(bounds) - 1


def _apply(text: str, spans: tuple[Span, ...] | list[Span]) -> str:
    """Return ``text`` with each span replaced by ``[REDACTED]``."""
    parts = []
    at = 0
    for start, end in spans:
        parts.append(text[at:start])
        parts.append(REDACTED)
        at = end
    parts.append(text[at:])
    return "".join(parts)


_DEFAULT_SPANS = _Spans()


def _signless(text: str) -> bool:
    """True when ``text`` holds no sign any rule of :meth:`_Spans.scan` is gated on.

    Such a text has no span to mask and no credential field: ``scan`` would
    run no pattern on it, so neither the search nor the cache (a digest of the
    text, a lock, an insert: more than the search of a text seen once, as a
    tool's result is) is worth its cost. ``tests/unit/test_masking_signs.py`` holds it.
    """
    return (
        ":" not in text
        and "=" not in text
        and "earer" not in text
        and "EARER" not in text
        and not any(c in text for c in _SIGN_CHARS)
    )


#: what the rules find in a text: its spans to replace, and whether a credential field holds a
#: non-empty array or object (:meth:`_Spans.scan`)
Found = tuple[tuple[Span, ...], bool]
_NOTHING: Found = ((), False)


def _find(text: str, names: frozenset[str]) -> tuple[Span, ...]:
    """The spans of :func:`mask_text`'s rules in ``text`` (cached, as :func:`mask_text` is)."""
    return _scan(text, names)[0]


def _scan(text: str, names: frozenset[str]) -> Found:
    """What the rules find in ``text`` (cached: see the comment inside)."""
    if len(text) < 8 or _signless(text):
        return _NOTHING
    finder = _Spans(names) if names else _DEFAULT_SPANS
    if len(text) > _CACHED_TEXT:
        spans, container = finder.scan(text)
        return tuple(spans), container
    # A model request re-sends the whole conversation: the same texts are masked
    # at every step (and twice per step: for the key and for the frame). The
    # rules are pure, so each text is searched once while it stays in the cache.
    # The cache is keyed by a 128-bit digest of the text, not the text, and holds
    # spans (offsets), not text: it must not keep the secrets it masks alive in
    # the process after the caller let go.
    key = (xxhash.xxh3_128_digest(text.encode("utf-8", "surrogatepass")), names)
    with _CACHE_LOCK:
        if key in _MASKED:
            _MASKED.move_to_end(key)
            return _MASKED[key]
    spans, container = finder.scan(text)
    found = (tuple(spans), container)
    with _CACHE_LOCK:
        _MASKED[key] = found
        if len(_MASKED) > _CACHE_SIZE:
            _MASKED.popitem(last=False)
    return found


def mask_scan(text: str, names: frozenset[str] = frozenset()) -> tuple[str, bool]:
    """Return :func:`mask_text` of ``text``, and whether a credential field holds a container.

    The text rules mask a credential field's string value in place (``"api_key": "..."``);
    an array or object under one (``"api_key": ["..."]``) is masked whole only by the
    rule of parsed JSON (:mod:`redrive._scrub`), so a caller parses a JSON text for which
    the flag is True. One search of the text (cached) serves both.

    Args:
        text: any text.
        names: as for :func:`mask_text`.

    Returns:
        ``(masked, container)``: ``masked`` is ``text`` itself when nothing looks secret;
        ``container`` is True when some ``"name": [`` or ``"name": {`` in ``text`` opens
        a non-empty array or object under a credential name (of the table: what the
        rule of parsed JSON masks; ``names`` are masked by their ``redact=`` paths).
    """
    spans, container = _scan(text, names)
    return (_apply(text, spans) if spans else text), container


def mask_text(text: str, names: frozenset[str] = frozenset()) -> str:
    """Return ``text`` with its secret-looking parts replaced by ``[REDACTED]``.

    Args:
        text: any text (an exception message, a URL, an event stream, a body).
        names: more field names whose values are masked in the text (folded:
            lower case, no ``-`` or ``_``), e.g. the last names of ``redact=`` patterns.

    Returns:
        ``text`` itself when nothing looks secret, else the masked copy (see
        the module docstring, point 3, for what is masked).
    """
    spans = _find(text, names)
    return _apply(text, spans) if spans else text


def mask_pieces(pieces: list[str], names: frozenset[str] = frozenset()) -> list[str]:
    """Mask the text the pieces make together, and cut the result back into the pieces.

    The rules of :func:`mask_text` run over ``"".join(pieces)`` (a secret split
    across two pieces, ``"sk-ab"`` + ``"cd..."``, is found); each masked span's
    ``[REDACTED]`` goes into the piece where the span starts, and the span's
    other characters are removed from every piece they were in. So
    ``"".join(mask_pieces(p)) == mask_text("".join(p))``, and no piece keeps
    any character of a masked secret.

    Args:
        pieces: the texts in order (a stream's text deltas).
        names: as for :func:`mask_text`.

    Returns:
        ``pieces`` itself when nothing looks secret, else a new list of as many pieces.
    """
    if len(pieces) == 1:
        masked = mask_text(pieces[0], names)
        return pieces if masked is pieces[0] else [masked]
    spans = _find("".join(pieces), names)
    if not spans:
        return pieces
    bounds = []  # each piece's (start, end) in the joined text
    at = 0
    for piece in pieces:
        bounds.append((at, at + len(piece)))
        at += len(piece)
    owners = [_owner(bounds, start) for start, _ in spans]
    out: list[str] = []
    for index, (piece, (lo, hi)) in enumerate(zip(pieces, bounds, strict=True)):
        parts = []
        cursor = lo
        for (start, stop), owner in zip(spans, owners, strict=True):
            if owner != index and (stop <= lo or start >= hi):
                continue
            parts.append(piece[cursor - lo : max(start, lo) - lo])
            if owner == index:
                parts.append(REDACTED)
            cursor = max(cursor, min(stop, hi))
        parts.append(piece[cursor - lo :])
        out.append("".join(parts))
    return out


#: Longest text whose masking is cached (characters), and how many are kept.
_CACHED_TEXT = 16384
_CACHE_SIZE = 512
#: digest of a text (and the extra field names) -> what the rules find in it (the spans
#: masking replaces, empty when nothing looks secret; see :data:`Found`); least recently
#: used first.
_MASKED: collections.OrderedDict[tuple[bytes, frozenset[str]], Found] = collections.OrderedDict()
_CACHE_LOCK = threading.Lock()


def _mask(text: str, names: frozenset[str]) -> str:
    """The rules of :func:`mask_text`, uncached (what the cache must agree with)."""
    spans = (_Spans(names) if names else _DEFAULT_SPANS).find(text)
    return _apply(text, spans) if spans else text
