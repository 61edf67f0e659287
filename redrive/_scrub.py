"""The one scrubber every journaled payload and run-record text passes through (pure).

What reaches a journal (every frame :class:`redrive.replay._writer.JournalWriter`
makes, and the run record's ``error`` and ``output``) goes through
:class:`Scrubber` first. It does three things, in this order, to every part
of the value (dict values, list items, stored values with their types and
key order kept, strings, JSON text and server-sent-event text inside strings):

1. **The run's ``redact=`` patterns** (compiled by
   ``redrive.replay._policy.compile_paths``): the value at a matching path
   becomes ``[REDACTED]``, in every frame kind. Paths are rooted at the
   frame's user data: a tool's arguments, result and error (``$.message``,
   ``$.args[0]``), a model step's request (its arguments) and response
   (``$.body...`` for a recorded HTTP exchange), a value, a note's data, the
   run's input and output; any other payload field is rooted at the payload
   (``$.field...``). A JSON text (an HTTP body) is matched as the JSON it
   holds, and so is each ``data:`` line of an event stream; ``$..name``
   matches at any depth everywhere.
2. **Credential fields, by name, by default**: a field whose name is a
   credential's (:func:`credential_field`: the names in
   :data:`CREDENTIAL_FIELDS`, and names ending in ``token``, ``secret``,
   ``password`` or ``apikey`` except those of :data:`NOT_CREDENTIALS`; case,
   ``-`` and ``_`` do not matter) has its value replaced by ``[REDACTED]``
   unless the value is a number, a bool or None (``max_tokens`` and token
   counts are not credentials). That covers the remote MCP server
   credentials both providers accept in request bodies (OpenAI
   ``tools[].authorization``, Anthropic ``mcp_servers[].authorization_token``),
   header pairs (``[name, value]``) under a ``headers`` field, and
   ``"name": "value"`` (or ``'name': 'value'``, or ``\"name\": \"value\"``)
   inside text. Not in a value a step hands back (a tool's result, a model
   callable's response, a recorded value, a ``recover()`` result): a replay
   hands back what the live loop got (DESIGN invariant 9), so a credential
   field there is hidden only when ``redact=`` names it.
3. **Secret-looking text, by default** (:func:`mask_text`): the value of a
   secret query or form parameter (``?key=...``, ``&auth_token=...``:
   :func:`secret_query_param`), the password of a URL (``https://u:pw@host``),
   a credential header line (``X-Auth-Token: ...``), ``Bearer <token>`` (a
   token holding a digit), and keys of a well-known shape (OpenAI ``sk-...``,
   ``sk-proj-...``, Anthropic ``sk-ant-...``, Stripe ``sk_live_``, GitHub
   ``ghp_``/``github_pat_``, GitLab ``glpat-``, Slack ``xox?-``, AWS
   ``AKIA...``, Google ``AIza...``, Hugging Face ``hf_``, JWTs) become
   ``[REDACTED]``.

Bytes values are not read (they are opaque). Match keys are computed on the
scrubbed form (a Run scrubs a step's arguments before its key is made), so a
rotated credential does not make a replay diverge. What the live loop gets
is never scrubbed; what a replay hands back is what the journal holds: a
value that looked secret comes back as ``[REDACTED]``.
"""

from __future__ import annotations

import collections
import functools
import json
import operator
import re
import threading
from collections.abc import Iterable
from typing import Any

import msgpack
import xxhash

from ._canonical import pack_tree
from ._canonical_types import _EXT_STORED, StoredValue
from .frames import Kind

__all__ = [
    "CREDENTIAL_FIELDS",
    "DEFAULT",
    "NOT_CREDENTIALS",
    "REDACTED",
    "SECRET_QUERY_PARAMS",
    "Scrubber",
    "credential_field",
    "mask_text",
    "secret_query_param",
]

#: What a redacted value is replaced with in every journal.
REDACTED = "[REDACTED]"

#: Field names (compared without case, ``-`` and ``_``) whose value is a credential.
CREDENTIAL_FIELDS = frozenset(
    {
        "authorization",
        "authorization_token",
        "proxy_authorization",
        "api_key",
        "apikey",
        "x_api_key",
        "api_token",
        "access_token",
        "refresh_token",
        "id_token",
        "auth_token",
        "x_auth_token",
        "session_token",
        "bearer_token",
        "token",
        "client_secret",
        "secret",
        "secret_key",
        "secret_access_key",
        "private_key",
        "password",
        "passwd",
        "passphrase",
        "credentials",
        "cookie",
        "set_cookie",
        "x_goog_api_key",
        "subscription_key",
        "ocp_apim_subscription_key",
        "x_amz_security_token",
    }
)
#: Token-like names that are not credentials (pagination cursors, tokenizer tokens).
NOT_CREDENTIALS = frozenset(
    {
        "page_token",
        "next_page_token",
        "prev_page_token",
        "previous_page_token",
        "next_token",
        "continuation_token",
        "sync_token",
        "bos_token",
        "eos_token",
        "pad_token",
        "unk_token",
        "sep_token",
        "cls_token",
        "mask_token",
        "stop_token",
    }
)
_CREDENTIAL_SUFFIXES = ("token", "secret", "password", "apikey")

#: Query (and form) parameters whose value is a secret, on top of every
#: :func:`credential_field` name: keys (``key``, Azure APIM ``subscription-key``),
#: ``auth``, ``code`` and signed-URL parts (Azure SAS ``sig``, AWS ``X-Amz-Signature``).
SECRET_QUERY_PARAMS = frozenset(
    {
        "key",
        "api-key",
        "api_key",
        "apikey",
        "x-api-key",
        "x-goog-api-key",
        "subscription-key",
        "ocp-apim-subscription-key",
        "access_token",
        "access-token",
        "refresh_token",
        "id_token",
        "token",
        "auth",
        "authorization",
        "client_secret",
        "secret",
        "password",
        "sig",
        "signature",
        "x-amz-signature",
        "x-amz-credential",
        "x-amz-security-token",
    }
)


def _fold(name: str) -> str:
    return name.strip().lower().replace("-", "").replace("_", "")


_FIELDS = frozenset(_fold(n) for n in CREDENTIAL_FIELDS)
_NOT_FIELDS = frozenset(_fold(n) for n in NOT_CREDENTIALS)
_QUERY = frozenset(_fold(n) for n in SECRET_QUERY_PARAMS)


def credential_field(name: str) -> bool:
    """Whether a field (or header) named ``name`` holds a credential.

    Args:
        name: the field's name as written (``Authorization``, ``x-auth-token``, ``apiKey``).

    Returns:
        True when ``name``, without case, ``-`` and ``_``, is in
        :data:`CREDENTIAL_FIELDS`, or ends in ``token``, ``secret``,
        ``password`` or ``apikey`` and is not in :data:`NOT_CREDENTIALS`.
    """
    return _credential_name(name)


@functools.lru_cache(maxsize=4096)
def _credential_name(name: str) -> bool:
    """:func:`credential_field`, cached: the same few field names come in every payload."""
    folded = _fold(name)
    if folded in _FIELDS:
        return True
    return folded.endswith(_CREDENTIAL_SUFFIXES) and folded not in _NOT_FIELDS


def secret_query_param(name: str) -> bool:
    """Whether a query or form parameter's value must never be journaled.

    Args:
        name: the parameter name, as sent.

    Returns:
        True for the names of :data:`SECRET_QUERY_PARAMS` and every
        :func:`credential_field` name (case, ``-`` and ``_`` folded).
    """
    return _fold(name) in _QUERY or credential_field(name)


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


_SCALARS = (int, float, bool, type(None))
#: Types :meth:`Scrubber.value` hands back as they are (bytes are opaque).
_KEPT = frozenset({int, float, bool, type(None), bytes})


def _child(path: str, key: Any) -> str:
    if isinstance(key, str) and key.isidentifier():
        return f"{path}.{key}"
    return f"{path}[{key!r}]"


#: Where a frame kind's user data sits in its payload (each field is a ``$`` root).
_ROOTS: dict[str, tuple[str, ...]] = {
    Kind.RUN_START.value: ("input",),
    Kind.MODEL_REQUEST.value: ("args",),
    Kind.TOOL_START.value: ("args",),
    Kind.TOOL_DONE.value: ("result",),
    Kind.TOOL_ERROR.value: ("error",),
    Kind.VALUE.value: ("value",),
    Kind.NOTE.value: ("data",),
    Kind.RUN_END.value: ("output", "error"),
}


class Scrubber:
    """Redacts the run's ``redact=`` paths, credential fields and secret-looking text.

    Args:
        patterns: the run's compiled ``redact=`` patterns (may be empty: the
            default rules still apply).
        defaults: apply the default rules (credential fields, secret-looking
            text); False applies the patterns alone.
        names: field names masked inside text too (``"name": "value"``,
            ``name=value``...), as credential names are: the last names of the
            ``redact=`` patterns (a path cannot be told inside a text, so the
            name is masked wherever it appears in one).
    """

    def __init__(
        self,
        patterns: tuple[re.Pattern[str], ...] = (),
        *,
        defaults: bool = True,
        names: Iterable[str] = (),
    ) -> None:
        self.patterns = patterns
        self.defaults = defaults
        self.names = frozenset(_fold(name) for name in names)

    def _credential(self, key: Any, item: Any) -> bool:
        """Whether ``item`` under ``key`` is a credential the default rules remove."""
        return (
            self.defaults
            and isinstance(key, str)
            and not isinstance(item, _SCALARS)
            and item != REDACTED
            and credential_field(key)
        )

    def _hit(self, where: str) -> bool:
        return any(p.match(where) for p in self.patterns)

    def value(self, value: Any, path: str = "$") -> Any:
        """Return ``value`` scrubbed, rooted at ``path`` (``value`` itself when nothing changes).

        ``value`` is a canonical tree (dicts, lists, str, bytes, numbers,
        msgpack ext values) that may hold :class:`StoredValue` parts.
        """
        if not self.patterns:  # no path can match: no path strings to build
            return self._unrooted(value) if self.defaults else value
        kind = type(value)
        if kind is str:
            return self._text(value, path)
        if kind is dict:
            out: dict[Any, Any] = {}
            changed = False
            for key, item in value.items():
                where = _child(path, key)
                if self._hit(where) or self._credential(key, item):
                    new: Any = REDACTED
                elif (
                    self.defaults
                    and isinstance(key, str)
                    and _fold(key) == "headers"
                    and isinstance(item, list)
                ):
                    new = self._header_pairs(item, where)
                else:
                    new = self.value(item, where)
                changed = changed or new is not item
                out[key] = new
            return out if changed else value
        if kind is list or kind is tuple:
            items = []
            for i, item in enumerate(value):
                where = f"{path}[{i}]"
                items.append(REDACTED if self._hit(where) else self.value(item, where))
            if all(a is b for a, b in zip(items, value, strict=True)):
                return value
            return items if kind is list else tuple(items)
        if kind is StoredValue:
            data = self._stored(value.data, path)
            return value if data is value.data else StoredValue(data)
        if kind is msgpack.ExtType and value.code == _EXT_STORED:  # a stored value, canonical
            data = self._stored(value.data, path)
            return value if data is value.data else msgpack.ExtType(_EXT_STORED, data)
        return value

    def _unrooted(self, value: Any) -> Any:
        """:meth:`value` for a scrubber without ``redact=`` patterns (the default rules only).

        The same result as :meth:`value`, without the path of every part
        (only the patterns read it), and without a call for a number or a text.
        """
        kind = type(value)
        if kind is str:
            return mask_text(value, self.names)
        if kind is dict:
            out: dict[Any, Any] = {}
            changed = False
            for key, item in value.items():
                t = type(item)
                if (  # the rule of _credential, the cached name test first
                    isinstance(key, str)
                    and _credential_name(key)
                    and not isinstance(item, _SCALARS)
                    and item != REDACTED
                ):
                    out[key] = REDACTED
                    changed = True
                    continue
                if t is str:
                    new: Any = mask_text(item, self.names)
                elif t in _KEPT:
                    out[key] = item
                    continue
                elif isinstance(item, list) and self._headers(key, item):
                    new = self._header_pairs(item, "$")
                else:
                    new = self._unrooted(item)
                changed = changed or new is not item
                out[key] = new
            return out if changed else value
        if kind is list or kind is tuple:
            items = [
                mask_text(item, self.names)
                if type(item) is str
                else item
                if type(item) in _KEPT
                else self._unrooted(item)
                for item in value
            ]
            if all(map(operator.is_, items, value)):
                return value
            return items if kind is list else tuple(items)
        if kind is StoredValue:
            data = self._stored(value.data, "$")
            return value if data is value.data else StoredValue(data)
        if kind is msgpack.ExtType and value.code == _EXT_STORED:  # a stored value, canonical
            data = self._stored(value.data, "$")
            return value if data is value.data else msgpack.ExtType(_EXT_STORED, data)
        return value

    def _headers(self, key: Any, item: Any) -> bool:
        """Whether ``item`` under ``key`` is a list of ``[name, value]`` header pairs to check."""
        return (
            self.defaults
            and isinstance(key, str)
            and _fold(key) == "headers"
            and isinstance(item, list)
        )

    def _header_pairs(self, pairs: list[Any], path: str) -> Any:
        out = []
        for i, pair in enumerate(pairs):
            if (
                isinstance(pair, list)
                and len(pair) == 2
                and isinstance(pair[0], str)
                and credential_field(pair[0])
            ):
                out.append([pair[0], REDACTED])
            else:
                out.append(self.value(pair, f"{path}[{i}]"))
        return pairs if all(a is b for a, b in zip(out, pairs, strict=True)) else out

    def _text(self, text: str, path: str) -> str:
        if not self.defaults:
            return text
        if self.patterns:
            stripped = text.lstrip()
            if stripped[:1] in ("{", "["):
                parsed = _json(stripped)
                if parsed is not _NOT_JSON:
                    new = self.value(parsed, path)
                    if new is parsed:
                        return mask_text(text, self.names)
                    return json.dumps(new, ensure_ascii=False, separators=(",", ":"))
            elif "data:" in text:
                return mask_text(self._events(text, path), self.names)
        return mask_text(text, self.names)

    def _events(self, text: str, path: str) -> str:
        """Apply the patterns to each ``data:`` line of an event stream that holds JSON."""
        lines = text.split("\n")
        for i, line in enumerate(lines):
            if not line.startswith("data:"):
                continue
            body = line[5:].strip()
            parsed = _json(body) if body[:1] in ("{", "[") else _NOT_JSON
            if parsed is _NOT_JSON:
                continue
            new = self.value(parsed, path)
            if new is not parsed:
                lines[i] = "data: " + json.dumps(new, ensure_ascii=False, separators=(",", ":"))
        return "\n".join(lines)

    def _stored(self, data: bytes, path: str) -> bytes:
        """Scrub a stored value's msgpack bytes, keeping its types and key order."""
        try:
            tree = msgpack.unpackb(data, raw=False, strict_map_key=False, use_list=False)
        except Exception:  # not ours to judge here: the decoder will say
            return data
        new = self._tree(tree, path)
        return data if new is tree else pack_tree(new)

    def _tree(self, node: Any, path: str) -> Any:
        """Like :meth:`value` over a raw stored-value tree (arrays are tuples; marks are ext).

        A stored value is what a step hands back to the loop (a tool's result,
        a model callable's response, a recorded value, a ``recover()`` result):
        the credential-field rule does not apply to it, so that a replay hands
        back the value the live loop got (DESIGN invariant 9) whatever its
        keys are called; ``redact=`` paths and secret-looking text still do.
        """
        kind = type(node)
        if kind is tuple:
            start = 1 if node and isinstance(node[0], msgpack.ExtType) else 0
            if start and len(node) == 3 and isinstance(node[1], str):  # an enum or codec value
                inner = self._tree(node[2], path)
                return node if inner is node[2] else (node[0], node[1], inner)
            items = list(node[:start])
            if not self.patterns:  # no path to build: none can match
                items.extend(self._tree(item, path) for item in node[start:])
            for i, item in enumerate(node[start:] if self.patterns else ()):
                where = f"{path}[{i}]"
                items.append(REDACTED if self._hit(where) else self._tree(item, where))
            same = all(a is b for a, b in zip(items, node, strict=True))
            return node if same else tuple(items)
        if kind is dict:
            out = {}
            changed = False
            for key, item in node.items():
                if not self.patterns:
                    new: Any = self._tree(item, path)
                    changed = changed or new is not item
                    out[key] = new
                    continue
                where = _child(path, key)
                # a name alone never changes a handed-back value
                new = REDACTED if self._hit(where) else self._tree(item, where)
                changed = changed or new is not item
                out[key] = new
            return out if changed else node
        if kind is str:
            return self._text(node, path)
        return node

    def payload(self, kind: str, payload: Any) -> Any:
        """Return a frame's payload scrubbed (``payload`` itself when nothing changes).

        Args:
            kind: the frame's kind (a :class:`~redrive.frames.Kind` value).
            payload: the payload as queued (a canonical tree, maybe with stored values).
        """
        if not isinstance(payload, dict):
            return self.value(payload)
        roots = _ROOTS.get(kind, ())
        if kind == Kind.MODEL_RESPONSE.value:
            roots = ("response", "view")
        out: dict[str, Any] = {}
        changed = False
        for key, item in payload.items():
            if not self.patterns or key in roots:  # no patterns: paths are never read
                new = self.value(item)
            else:
                new = self.value(item, _child("$", key))
            changed = changed or new is not item
            out[key] = new
        return out if changed else payload

    def text(self, text: str | None) -> str | None:
        """Return a run-record text (``error``) scrubbed as a frame's string would be."""
        return None if text is None else self.value(text)


class _NotJson:
    pass


_NOT_JSON: Any = _NotJson()


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return _NOT_JSON


#: A scrubber with no ``redact=`` patterns: the default rules only.
DEFAULT = Scrubber()
