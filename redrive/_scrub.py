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

import json
import operator
import re
from collections.abc import Iterable
from typing import Any

import msgpack

from ._canonical import pack_tree
from ._canonical_types import _EXT_STORED, StoredValue
from ._credentials import (
    CREDENTIAL_FIELDS,
    NOT_CREDENTIALS,
    REDACTED,
    SECRET_QUERY_PARAMS,
    _credential_name,
    _fold,
    credential_field,
    secret_query_param,
)
from ._jsontext import NOT_JSON, loads
from ._masking import _CACHE_LOCK as _CACHE_LOCK
from ._masking import _MASKED as _MASKED
from ._masking import _mask as _mask
from ._masking import mask_text
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


_NOT_JSON: Any = NOT_JSON


def _json(text: str) -> Any:
    """The JSON in ``text``, or ``_NOT_JSON`` (not JSON, or too deep: masked as text)."""
    return loads(text)


#: A scrubber with no ``redact=`` patterns: the default rules only.
DEFAULT = Scrubber()
