"""Scrubbing a recorded stream as one text: a secret split across chunks is found and masked.

A stream is stored as its events (``chunks``, each a server-sent event as
received). A secret the model streams in two deltas (``"sk-ab"`` then
``"cd..."``, or ``"Bea"`` then ``"rer <token>"``) is in no one event, so the
default rules of :mod:`redrive._scrub` run over the stream's *assembled*
texts instead, and the masked result is cut back into the recorded events
(:func:`redrive._masking.mask_pieces`): no stored event and no replayed
delta holds any character of the secret.

What is assembled: each event whose ``data:`` line is a JSON object or array
is parsed, and its strings are grouped by their JSON path (``choices[0].
delta.content``, ``delta.text``, ``delta.partial_json``...): the strings of
one path, in stream order, are one text (a provider streams a field's text
as successive values at the same path: OpenAI Chat Completions chunks,
Anthropic ``content_block_delta``, OpenAI Responses ``*.delta`` events). The
other events (not JSON, or several data lines) are one more text, raw.
A field with a credential's name (:func:`redrive._credentials.credential_field`)
has its value replaced whole. Signed or encrypted content
(:mod:`redrive._signed`: thinking deltas and signatures, encrypted
reasoning) is left as it was sent. An event that changes is written back as
``data: <compact JSON>`` (its other lines kept); an event that does not keep
its bytes.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ._credentials import REDACTED, _fold, credential_field, hides_something
from ._jsontext import dumps
from ._masking import mask_pieces
from ._signed import signed

__all__ = ["mask_token_list", "scrub_events"]

#: one string slot: (event index, its container, its key or index)
_Slot = tuple[int, Any, Any]


class _Event:
    """One event being scrubbed: its lines, the index of its JSON data line, the parsed data."""

    def __init__(self, lines: list[str], at: int, data: Any) -> None:
        self.lines = lines
        self.at = at
        self.data = data
        self.changed = False

    def text(self) -> str:
        line = self.lines[self.at]
        end = "\r" if line.endswith("\r") else ""
        body = dumps(self.data)
        lines = [*self.lines]
        lines[self.at] = "data: " + body + end
        return "\n".join(lines)


def _parse(chunk: str) -> _Event | None:
    """The event of ``chunk`` when it has exactly one ``data:`` line holding a JSON object/array."""
    if "data:" not in chunk:
        return None
    lines = chunk.split("\n")
    at = [i for i, line in enumerate(lines) if line.startswith("data:")]
    if len(at) != 1:
        return None
    body = lines[at[0]][5:].strip()
    if body[:1] not in ("{", "["):
        return None
    try:
        data = json.loads(body)
    except ValueError:
        return None
    return _Event(lines, at[0], data)


class _Walk:
    """Collects an event's string slots by JSON path; masks credential-named fields at once."""

    def __init__(self, names: frozenset[str]) -> None:
        self.names = names
        self.paths: dict[tuple[Any, ...], list[_Slot]] = {}

    def _secret(self, key: Any) -> bool:
        return isinstance(key, str) and (
            credential_field(key) or (bool(self.names) and _fold(key) in self.names)
        )

    def node(self, index: int, event: _Event, node: Any, path: tuple[Any, ...]) -> None:
        if type(node) is dict:
            if signed(node):
                return
            for key, item in node.items():
                if self._secret(key) and hides_something(item):
                    node[key] = REDACTED
                    event.changed = True
                else:
                    self._item(index, event, node, key, item, path)
        elif type(node) is list:
            for i, item in enumerate(node):
                self._item(index, event, node, i, item, path)

    def _item(
        self, index: int, event: _Event, node: Any, key: Any, item: Any, path: tuple[Any, ...]
    ) -> None:
        if type(item) is str:
            self.paths.setdefault((*path, key), []).append((index, node, key))
        elif type(item) is dict or type(item) is list:
            self.node(index, event, item, (*path, key))


def scrub_events(chunks: Sequence[Any], names: frozenset[str] = frozenset()) -> Sequence[Any]:
    """Return a stream's stored events with every secret masked across event boundaries.

    Args:
        chunks: the stored events (text; bytes are opaque and kept).
        names: more field names to mask (folded), as for :func:`redrive._masking.mask_text`.

    Returns:
        ``chunks`` itself when nothing changes, else a new list (a tuple for a
        tuple) of as many events.
    """
    events: list[_Event | None] = []
    walk = _Walk(names)
    raw: list[int] = []
    for index, chunk in enumerate(chunks):
        event = _parse(chunk) if type(chunk) is str else None
        events.append(event)
        if event is not None:
            walk.node(index, event, event.data, ())
        elif type(chunk) is str:
            raw.append(index)
    for slots in walk.paths.values():
        pieces = [node[key] for _, node, key in slots]
        masked = mask_pieces(pieces, names)
        if masked is pieces:
            continue
        for (index, node, key), old, new in zip(slots, pieces, masked, strict=True):
            if new != old:
                node[key] = new
                event = events[index]
                assert event is not None
                event.changed = True
    out = list(chunks)
    changed = False
    if raw:
        pieces = [chunks[i] for i in raw]
        masked = mask_pieces(pieces, names)
        if masked is not pieces:
            for i, new in zip(raw, masked, strict=True):
                out[i] = new
            changed = True
    for index, event in enumerate(events):
        if event is not None and event.changed:
            out[index] = event.text()
            changed = True
    if not changed:
        return chunks
    return tuple(out) if type(chunks) is tuple else out


def _is_token_entry(item: Any) -> bool:
    return type(item) is dict and type(item.get("token")) is str


def _retokened(entry: dict[str, Any], old: str, new: str) -> dict[str, Any]:
    """``entry`` with its ``token`` ``old`` now ``new`` (its ``bytes`` too), alternatives alike."""
    out = dict(entry)
    if out.get("token") == old:
        out["token"] = new
        if isinstance(out.get("bytes"), list):
            out["bytes"] = list(new.encode("utf-8"))
    alternatives = out.get("top_logprobs")
    if isinstance(alternatives, list):
        out["top_logprobs"] = [
            _retokened(alt, old, new) if _is_token_entry(alt) else alt for alt in alternatives
        ]
    return out


def mask_token_list(items: list[Any], names: frozenset[str] = frozenset()) -> list[Any]:
    """Mask a tokenized text: a list of ``{"token": str, ...}`` entries read as one text.

    A non-streamed OpenAI response spells its message out again in
    ``logprobs.content`` (and ``logprobs.refusal``): one entry per token, each
    with the token's ``bytes`` and its ``top_logprobs`` alternatives. A secret
    the model wrote is then in no one entry (``"sk-proj-"``, ``"LOGPROB"``,
    ...), so the tokens are masked together (:func:`mask_pieces`) as a stream's
    deltas are, and each changed entry's ``bytes`` and the alternatives equal to
    its old token follow. Source of the shape: OpenAI Chat Completions API
    reference, ``choices[].logprobs.content[]`` (``token``, ``bytes``,
    ``logprob``, ``top_logprobs``).

    Args:
        items: a list; only one whose entries all carry a string ``token`` is a text.
        names: as for :func:`redrive._masking.mask_text`.

    Returns:
        ``items`` itself when nothing is masked, else a new list of as many entries.
    """
    if len(items) < 2 or not all(map(_is_token_entry, items)):
        return items
    tokens = [entry["token"] for entry in items]
    masked = mask_pieces(tokens, names)
    if masked is tokens:
        return items
    return [
        entry if old == new else _retokened(entry, old, new)
        for entry, old, new in zip(items, tokens, masked, strict=True)
    ]
