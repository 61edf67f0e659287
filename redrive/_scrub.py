"""The one scrubber every journaled payload and run-record text passes through (pure).

Every frame :class:`redrive.replay._writer.JournalWriter` makes, and the run
record's ``error`` and ``output``, go through :class:`Scrubber` first, which
does three things to every part of the value (stored values keep types and order):

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
   credential's in the table of :mod:`redrive._credentials` (``FIELD`` form:
   ``api_key``, ``authorization_token``, ``db_password``; not ``token`` or
   ``max_tokens``) has its value replaced by ``[REDACTED]`` unless it holds
   nothing to hide (a number, a bool, None, an empty array or object), in a
   parsed tree, a JSON text (parsed, to mask an array or object whole) and a
   stream's events alike; so do ``[name, value]`` header pairs under a
   ``headers`` field (``HEADER`` form). Not in a value a step hands back (a
   tool's result, a model callable's response, a recorded value, a
   ``recover()`` result): a replay hands back what the live loop got (DESIGN
   invariant 9), so a credential field there is hidden only when ``redact=``
   names it.
3. **Secret-looking text, by default** (:func:`mask_text`, :mod:`redrive._masking`):
   credential names in text in each of their wire forms (``?name=value``,
   ``Name: value``, ``"name": "value"``), URL user info, ``Bearer <token>``
   and keys of a well-known shape. A stream's events (``chunks``) are masked
   as the texts they assemble (:mod:`redrive._scrub_stream`), so a secret
   split across two deltas is found.

Signed or encrypted provider content (:mod:`redrive._signed`) is left as it
was by rules 2 and 3; ``keep=`` paths (:mod:`redrive._secrets_policy`) too.
Bytes are opaque. Match keys are made on the scrubbed form (a rotated key
still replays). The live loop gets what was sent; a replay hands back what
the journal holds (a value that looked secret comes back as ``[REDACTED]``).
"""

from __future__ import annotations

import operator
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import msgpack

from ._canonical import pack_tree
from ._canonical_types import _EXT_STORED, StoredValue
from ._credentials import (
    CREDENTIAL_FIELDS,
    CREDENTIAL_HEADERS,
    CREDENTIALS,
    NOT_CREDENTIALS,
    REDACTED,
    SECRET_QUERY_PARAMS,
    _credential_name,
    _fold,
    credential_field,
    credential_header,
    hides_something,
    secret_query_param,
)
from ._jsontext import NOT_JSON, dumps, loads
from ._masking import _CACHE_LOCK as _CACHE_LOCK
from ._masking import _MASKED as _MASKED
from ._masking import _mask as _mask
from ._masking import mask_pieces, mask_scan, mask_text
from ._scrub_stream import mask_token_list, scrub_events
from ._secrets_policy import STEP_KINDS, secrets_policy
from ._signed import holds_signed, signed
from .frames import Kind

__all__ = [
    "CREDENTIALS",
    "CREDENTIAL_FIELDS",
    "CREDENTIAL_HEADERS",
    "DEFAULT",
    "NOT_CREDENTIALS",
    "REDACTED",
    "SECRET_QUERY_PARAMS",
    "Scrubber",
    "credential_field",
    "credential_header",
    "mask_pieces",
    "mask_text",
    "secret_query_param",
]


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
        keep: Mapping[str, tuple[re.Pattern[str], ...]] | None = None,
        policy: Mapping[str, Any] | None = None,
    ) -> None:
        self.patterns = patterns
        self.defaults = defaults
        self.names = frozenset(_fold(name) for name in names)
        #: paths the default rules leave verbatim in this scrubber's payloads
        self.kept: tuple[re.Pattern[str], ...] = ()
        #: a path string is built for each part only when some pattern may read it
        self._paths = bool(patterns)
        #: the patterns alone: what reaches inside signed content (see redrive._signed)
        self._plain = self if not defaults else Scrubber(patterns, defaults=False)
        #: step kind -> the scrubber of its payloads (those with ``keep`` paths)
        self._kinds: dict[str, Scrubber] = {}
        for kind, kept in (keep or {}).items():
            if kept:
                sub = Scrubber(patterns, defaults=defaults, names=self.names)
                sub.kept = kept
                sub._paths = True
                self._kinds[kind] = sub
        self._policy = secrets_policy(policy or {})

    def _credential(self, key: Any, item: Any) -> bool:
        """Whether ``item`` under ``key`` is a credential the default rules remove."""
        return (
            self.defaults
            and isinstance(key, str)
            and credential_field(key)
            and hides_something(item)
        )

    def _hit(self, where: str) -> bool:
        return any(p.match(where) for p in self.patterns)

    def value(self, value: Any, path: str = "$") -> Any:
        """Return ``value`` scrubbed, rooted at ``path`` (``value`` itself when nothing changes).

        ``value`` is a canonical tree (dicts, lists, str, bytes, numbers,
        msgpack ext values) that may hold :class:`StoredValue` parts.
        """
        if not self._paths:  # no path can match: no path strings to build
            return self._unrooted(value) if self.defaults else value
        kind = type(value)
        if kind is str:
            return self._text(value, path)
        if kind is dict:
            if self.defaults and signed(value):
                return self._plain.value(value, path)
            out: dict[Any, Any] = {}
            changed = False
            for key, item in value.items():
                where = _child(path, key)
                if self._hit(where) or self._credential(key, item):
                    new: Any = REDACTED
                elif self.kept and any(p.match(where) for p in self.kept):
                    new = self._plain.value(item, where)
                elif isinstance(item, list) and self._headers(key, item):
                    new = self._header_pairs(item, where)
                elif key == "chunks" and isinstance(item, list | tuple):
                    new = self._chunks(item, where)
                else:
                    new = self.value(item, where)
                changed = changed or new is not item
                out[key] = new
            return out if changed else value
        if kind is list or kind is tuple:
            if self.defaults and kind is list:
                value = mask_token_list(value, self.names)
            items = []
            for i, item in enumerate(value):
                where = f"{path}[{i}]"
                if self._hit(where):
                    items.append(REDACTED)
                elif self.kept and any(p.match(where) for p in self.kept):
                    items.append(self._plain.value(item, where))
                else:
                    items.append(self.value(item, where))
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
            return self._string(value)
        if kind is dict:
            if signed(value):
                return value
            out: dict[Any, Any] = {}
            changed = False
            for key, item in value.items():
                t = type(item)
                if (  # the rule of _credential, the cached name test first
                    isinstance(key, str) and _credential_name(key) and hides_something(item)
                ):
                    out[key] = REDACTED
                    changed = True
                    continue
                if t is str:
                    new: Any = self._string(item)
                elif t in _KEPT:
                    out[key] = item
                    continue
                elif isinstance(item, list) and self._headers(key, item):
                    new = self._header_pairs(item, "$")
                elif key == "chunks" and (t is list or t is tuple):
                    new = scrub_events(item, self.names)
                else:
                    new = self._unrooted(item)
                changed = changed or new is not item
                out[key] = new
            return out if changed else value
        if kind is list or kind is tuple:
            if kind is list:
                value = mask_token_list(value, self.names)
            items = [
                self._string(item)
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
                and credential_header(pair[0])
            ):
                out.append([pair[0], REDACTED])
            else:
                out.append(self.value(pair, f"{path}[{i}]"))
        return pairs if all(a is b for a, b in zip(out, pairs, strict=True)) else out

    def _string(self, text: str) -> str:
        """Mask a text by the default rules; a JSON text holding signed content, as JSON."""
        # a tokenized text (logprobs) may spell a secret no one token holds: walked
        if '"token"' in text and (walked := self._walked(text)) is not None:
            return walked
        masked, container = mask_scan(text, self.names)
        # a credential field holding an array or object: masked whole, as parsed JSON is
        if container and (walked := self._walked(text)) is not None:
            return walked
        if masked is text:  # nothing to mask (the cached common case): nothing to keep either
            return text
        if holds_signed(text) and (walked := self._walked(text)) is not None:
            return walked
        return masked

    def _walked(self, text: str) -> str | None:
        """``text`` parsed as JSON and its tree masked; None when it is no JSON object or array."""
        if text.lstrip()[:1] not in _JSON_HEADS:
            return None
        parsed = loads(text)
        if not isinstance(parsed, dict | list):
            return None
        new = self._unrooted(parsed)
        return text if new is parsed else dumps(new)

    def _text(self, text: str, path: str) -> str:
        if not self.defaults:
            return text
        if self._paths:
            stripped = text.lstrip()
            if stripped[:1] in ("{", "["):
                parsed = loads(stripped)
                if parsed is not NOT_JSON:
                    new = self.value(parsed, path)
                    if new is not parsed:
                        return dumps(new)
                    return text if holds_signed(text) else mask_text(text, self.names)
            elif "data:" in text:
                return mask_text(self._events(text, path), self.names)
        return self._string(text)

    def _chunks(self, chunks: Sequence[Any], path: str) -> Sequence[Any]:
        """Scrub a stream's events: the patterns per ``data:`` line, then the default rules.

        The default rules run over the assembled stream
        (:func:`redrive._scrub_stream.scrub_events`).
        """
        out = [
            self._plain._events(chunk, f"{path}[{i}]")
            if self.patterns and type(chunk) is str and "data:" in chunk
            else chunk
            for i, chunk in enumerate(chunks)
        ]
        kept: Sequence[Any] = chunks if all(map(operator.is_, out, chunks)) else out
        return scrub_events(kept, self.names) if self.defaults else kept

    def _events(self, text: str, path: str) -> str:
        """Apply the patterns to each ``data:`` line of an event stream that holds JSON."""
        lines = text.split("\n")
        for i, line in enumerate(lines):
            if not line.startswith("data:"):
                continue
            body = line[5:].strip()
            parsed = loads(body) if body[:1] in ("{", "[") else NOT_JSON
            if parsed is NOT_JSON:
                continue
            new = self.value(parsed, path)
            if new is not parsed:
                lines[i] = "data: " + dumps(new)
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
            if not self._paths:  # no path to build: none can match
                items.extend(self._tree(item, path) for item in node[start:])
            for i, item in enumerate(node[start:] if self._paths else ()):
                where = f"{path}[{i}]"
                if self._hit(where):
                    items.append(REDACTED)
                elif self.kept and any(p.match(where) for p in self.kept):
                    items.append(self._plain._tree(item, where))
                else:
                    items.append(self._tree(item, where))
            same = all(a is b for a, b in zip(items, node, strict=True))
            return node if same else tuple(items)
        if kind is dict:
            if self.defaults and signed(node):
                return self._plain._tree(node, path)
            out = {}
            changed = False
            for key, item in node.items():
                if key == "chunks" and type(item) is tuple and self.defaults:
                    new: Any = self._stored_chunks(item, _child(path, key))
                elif not self._paths:
                    new = self._tree(item, path)
                else:
                    where = _child(path, key)
                    # a name alone never changes a handed-back value
                    if self._hit(where):
                        new = REDACTED
                    elif self.kept and any(p.match(where) for p in self.kept):
                        new = self._plain._tree(item, where)
                    else:
                        new = self._tree(item, where)
                changed = changed or new is not item
                out[key] = new
            return out if changed else node
        if kind is str:
            return self._text(node, path)
        return node

    def _stored_chunks(self, node: tuple[Any, ...], path: str) -> Any:
        """A stored stream's events (an array, maybe led by its type mark): see :meth:`_chunks`."""
        start = 1 if node and isinstance(node[0], msgpack.ExtType) else 0
        items = node[start:]
        if not all(type(item) is str or type(item) is bytes for item in items):
            return self._tree(node, path)
        new = self._chunks(items, path)
        return node if new is items else (*node[:start], *new)

    def payload(self, kind: str, payload: Any, *, scrubbed: str = "") -> Any:
        """Return a frame's payload scrubbed (``payload`` itself when nothing changes).

        Args: ``kind``, the frame's kind (a :class:`~redrive.frames.Kind` value);
        ``payload`` as queued (a canonical tree, maybe with stored values); ``scrubbed``,
        a root field (``"args"``) that :meth:`value` of this kind's scrubber returned
        (lists maybe prefix references): kept as is, the bytes a second walk makes.
        """
        if self._kinds and (sub := self.for_step(STEP_KINDS.get(kind, ""))) is not self:
            return sub.payload(kind, payload, scrubbed=scrubbed)
        if not isinstance(payload, dict):
            return self.value(payload)
        roots = ("response", "view") if kind == "model_response" else _ROOTS.get(kind, ())
        out: dict[str, Any] = {}
        changed = False
        for key, item in payload.items():
            if (key == scrubbed and key in roots) or type(item) in _KEPT:  # nothing to scrub
                new = item
            elif not self._paths or key in roots:  # no patterns: paths are never read
                new = self.value(item)
            else:
                new = self.value(item, _child("$", key))
            changed = changed or new is not item
            out[key] = new
        return out if changed else payload

    def for_step(self, kind: str) -> Scrubber:
        """The scrubber of a step kind's payloads (``"tool"``...), with its ``keep`` paths."""
        return self._kinds.get(kind, self) if self._kinds else self

    def policy(self) -> dict[str, Any]:
        """What this scrubber applies, as recorded in a run's ``run_start`` flags (``secrets``).

        Returns:
            ``{"fingerprint": 16 hex, "table": 16 hex, "redact": [...], "keep": [...]}``:
            the ``redact=`` and ``keep=`` patterns as given, the digest of the
            credential table (:data:`CREDENTIALS`) and of the signed-content rule,
            and a digest of all of it (two runs scrubbed alike have the same one).
        """
        return dict(self._policy)

    def text(self, text: str | None) -> str | None:
        """Return a run-record text (``error``) scrubbed as a frame's string would be."""
        return None if text is None else self.value(text)


_JSON_HEADS = frozenset("{[")


#: A scrubber with no ``redact=`` patterns: the default rules only.
DEFAULT = Scrubber()
