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

from ._credentials import REDACTED, _fold, credential_field, secret_query_param

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
_USERINFO = re.compile(r"(?P<lead>[A-Za-z][A-Za-z0-9+.\-]*://[^\s/:@\"']+:)[^\s/@\"']+(?=@)")
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
#: "name": "value" (JSON) and 'name': 'value' (a Python repr) in text
_FIELD_TEXT = re.compile(
    rf"(?P<q>[\"'])(?P<name>{_NAME})(?P=q)\s*:\s*"
    r"""(?P<value>"[^"\\]*(?:\\.[^"\\]*)*"|'[^'\\]*(?:\\.[^'\\]*)*')"""
)
#: \"name\": \"value\": JSON text inside a JSON string (a tool call's ``arguments``)
_ESCAPED_FIELD_TEXT = re.compile(
    rf'\\"(?P<name>{_NAME})\\"\s*:\s*\\"(?P<value>(?:[^"\\]|\\\\)*)\\"'
)
#: a header line: ``name: value``
_HEADER_LINE = re.compile(
    rf"^(?P<lead>[ \t]*(?P<name>{_NAME})[ \t]*:[ \t]*)(?P<value>[^\r\n]+)", re.MULTILINE
)


class _Masker:
    """The text rules' replacements; ``names`` are more field names to mask (folded)."""

    def __init__(self, names: frozenset[str] = frozenset()) -> None:
        self.names = names

    def _secret(self, name: str) -> bool:
        return credential_field(name) or (bool(self.names) and _fold(name) in self.names)

    def param(self, match: re.Match[str]) -> str:
        name = match.group("name")
        if not (secret_query_param(name) or self._secret(name)):
            return match[0]
        return match.group("lead") + REDACTED

    def field(self, match: re.Match[str]) -> str:
        if not self._secret(match.group("name")):
            return match[0]
        quote = match.group("value")[0]
        return match[0][: match.start("value") - match.start()] + quote + REDACTED + quote

    def escaped(self, match: re.Match[str]) -> str:
        if not self._secret(match.group("name")):
            return match[0]
        return match[0][: match.start("value") - match.start()] + REDACTED + '\\"'

    def header(self, match: re.Match[str]) -> str:
        if not self._secret(match.group("name")):
            return match[0]
        return match.group("lead") + REDACTED


def _mask_lead(match: re.Match[str]) -> str:
    return match.group("lead") + REDACTED


_DEFAULT_MASKER = _Masker()


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
    if len(text) < 8:
        return text
    if len(text) > _CACHED_TEXT:
        return _mask(text, names)
    # A model request re-sends the whole conversation: the same texts are masked
    # at every step (and twice per step: for the key and for the frame). The
    # rules are pure, so each text is masked once while it stays in the cache.
    # The cache is keyed by a 128-bit digest of the text, not the text: it must
    # not keep the secrets it masks alive in the process after the caller let go.
    key = (xxhash.xxh3_128_digest(text.encode("utf-8", "surrogatepass")), names)
    with _CACHE_LOCK:
        if key in _MASKED:
            _MASKED.move_to_end(key)
            masked = _MASKED[key]
            return text if masked is None else masked
    masked = _mask(text, names)
    with _CACHE_LOCK:
        _MASKED[key] = None if masked is text else masked
        if len(_MASKED) > _CACHE_SIZE:
            _MASKED.popitem(last=False)
    return masked


#: Longest text whose masking is cached (characters), and how many are kept.
_CACHED_TEXT = 16384
_CACHE_SIZE = 512
#: digest of a text (and the extra field names) -> its masked copy, or None when
#: masking changes nothing; least recently used first.
_MASKED: collections.OrderedDict[tuple[bytes, frozenset[str]], str | None] = (
    collections.OrderedDict()
)
_CACHE_LOCK = threading.Lock()


def _mask(text: str, names: frozenset[str]) -> str:
    """The rules of :func:`mask_text` (uncached)."""
    masker = _Masker(names) if names else _DEFAULT_MASKER
    # each rule runs only where its sign is in the text: most text has none
    if ":" in text:
        if '"' in text or "'" in text:
            text = _FIELD_TEXT.sub(masker.field, text)
            if '\\"' in text:
                text = _ESCAPED_FIELD_TEXT.sub(masker.escaped, text)
        text = _HEADER_LINE.sub(masker.header, text)
        if "://" in text:
            text = _USERINFO.sub(_mask_lead, text)
    if "=" in text:
        text = _PARAM.sub(masker.param, text)
    if "earer" in text or "EARER" in text:
        text = _BEARER.sub(_mask_lead, text)
    if any(sign in text for sign in _SHAPE_SIGNS):
        text = _SHAPE.sub(REDACTED, text)
    return text
