"""Secrets in what an export or a shared page is about to write (pure over a run's frames).

``redrive export`` (``.rdj``, JSON Lines, OTLP/JSON) and ``redrive view`` write
a run for someone else to read. Before they write, :func:`find_secrets` scans
every frame and the run record with the journal writer's own detector
(:data:`redrive._scrub.DEFAULT`: credential fields by name, credential
headers, secret-looking text, :func:`redrive._scrub.mask_text`), so a
secret the journal holds all the same is found:

- a run recorded with ``keep=`` paths, or by an older redrive, or imported
  from a file or cassette, holds what the default rules would mask;
- a value a step handed back keeps its credential fields verbatim (a replay
  hands back what the loop got, DESIGN invariant 9); a share has no such
  reason, so a credential field there is a finding too.

The CLI refuses to write when something is found, naming the run, the step's
seq and the path, unless ``--allow-secrets`` says otherwise.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import attrs
import msgpack

from ._canonical_types import _EXT_STORED
from ._credentials import credential_field, hides_something
from ._scrub import DEFAULT
from .frames import Frame

__all__ = ["SecretFound", "find_secrets", "refusal"]


@attrs.frozen(kw_only=True)
class SecretFound:
    """One secret an export would write.

    Attributes:
        run_id: the run.
        seq: the frame's seq (None: the run record's ``input``, ``output`` or ``error``).
        kind: the frame's kind (``tool_done``...), or ``"run"`` for the run record.
        name: the step's name ("" for the run record).
        path: where in the payload (``$.result.password``, ``$.args.body.messages[0].content``).
        why: ``"credential field"`` or ``"secret-looking text"``.
    """

    run_id: str
    seq: int | None
    kind: str
    name: str
    path: str
    why: str

    def where(self) -> str:
        """``seq 3 (tool_done lookup) $.result.password`` / ``the run record's $.output``."""
        if self.seq is None:
            return f"the run record's {self.path}"
        return f"seq {self.seq} ({self.kind} {self.name}) {self.path}"


def _child(path: str, key: Any) -> str:
    if isinstance(key, str) and key.isidentifier():
        return f"{path}.{key}"
    return f"{path}[{key!r}]"


def _unpack(data: bytes) -> Any:
    return msgpack.unpackb(data, raw=False, strict_map_key=False, use_list=True)


def _changed(before: Any, after: Any, path: str) -> Iterator[str]:
    """The paths where the scrubbed ``after`` differs from ``before`` (stored values opened)."""
    stack = [(before, after, path)]
    while stack:
        a, b, where = stack.pop()
        if a is b:
            continue
        if isinstance(a, msgpack.ExtType) and isinstance(b, msgpack.ExtType):  # before tuples
            if a.code == b.code == _EXT_STORED and a.data != b.data:
                stack.append((_stored(a.data), _stored(b.data), where))
        elif isinstance(a, dict) and isinstance(b, dict):
            stack.extend((a[k], b.get(k), _child(where, k)) for k in a)
        elif isinstance(a, list | tuple) and isinstance(b, list | tuple) and len(a) == len(b):
            stack.extend((x, y, f"{where}[{i}]") for i, (x, y) in enumerate(zip(a, b, strict=True)))
        elif a != b:
            yield where


def _stored(data: bytes) -> Any:
    try:
        return msgpack.unpackb(data, raw=False, strict_map_key=False, use_list=False)
    except Exception:
        return data


def _handed_back_credentials(tree: Any, path: str) -> Iterator[str]:
    """Credential fields inside stored values (what a step handed back), by their paths."""
    stack: list[tuple[Any, str, bool]] = [(tree, path, False)]
    while stack:
        node, where, inside = stack.pop()
        if isinstance(node, msgpack.ExtType) and node.code == _EXT_STORED:
            stack.append((_stored(node.data), where, True))
        elif isinstance(node, dict):
            for key, item in node.items():
                at = _child(where, key)
                secret = inside and isinstance(key, str) and credential_field(key)
                if secret and hides_something(item):
                    yield at
                    continue
                stack.append((item, at, inside))
        elif isinstance(node, list | tuple):
            stack.extend((item, f"{where}[{i}]", inside) for i, item in enumerate(node))


#: Fields of a frame kind that redrive writes about the program, not from the user's data:
#: the fingerprint names the process's registered tools (a tool named ``get_credentials`` is
#: not a credential) and holds digests; the flags are settings. The writer keeps them as
#: they are, so a share does too.
_OWN_FIELDS: dict[str, frozenset[str]] = {"run_start": frozenset({"fingerprint", "flags"})}


def _scan(tree: Any, kind: str) -> list[tuple[str, str]]:
    own = _OWN_FIELDS.get(kind)
    if own and isinstance(tree, dict):
        tree = {k: v for k, v in tree.items() if k not in own}
    scrubbed = DEFAULT.payload(kind, tree) if kind != "run" else DEFAULT.value(tree)
    found = {p: "secret-looking text" for p in _changed(tree, scrubbed, "$")}
    for path in _handed_back_credentials(tree, "$"):
        found.setdefault(path, "credential field")
    for path in list(found):
        leaf = path.rsplit(".", 1)[-1]
        if credential_field(leaf) and found[path] == "secret-looking text":
            found[path] = "credential field"
    return sorted(found.items())


def find_secrets(
    run_id: str, frames: Iterable[Frame], record: dict[str, Any] | None = None
) -> list[SecretFound]:
    """Every secret the journal writer's detector finds in a run's frames and record.

    Args:
        run_id: the run.
        frames: its frames, in seq order.
        record: the run record's user data (``{"input", "output", "error"}``), or None.

    Returns:
        The findings, the run record's first, then by seq and path; empty when
        nothing looks secret.
    """
    return [
        SecretFound(run_id=run_id, seq=seq, kind=kind, name=name, path=path, why=why)
        for seq, kind, name, tree in _trees(frames, record)
        for path, why in _scan(tree, kind)
    ]


def _trees(
    frames: Iterable[Frame], record: dict[str, Any] | None
) -> Iterator[tuple[int | None, str, str, Any]]:
    """``(seq, kind, name, payload tree)``: the run record's (seq None), then each frame's."""
    if record:
        yield None, "run", "", record
    for frame in frames:
        try:
            tree = _unpack(frame.payload)
        except Exception:  # a damaged frame: verify reports it; nothing readable to leak
            continue
        yield frame.seq, frame.kind, frame.name, tree


def refusal(found: list[SecretFound], what: str, flag: str = "--allow-secrets") -> str:
    """The message that refuses to write ``what`` (``"export"``...) because of ``found``.

    Names the run, each finding's seq and path (the first five), and the two
    ways on: mask the values (``redact=`` paths in ``redrive.run``) or pass
    ``flag`` to write them all the same.
    """
    shown = "; ".join(f"{s.where()} ({s.why})" for s in found[:5])
    more = f" and {len(found) - 5} more" if len(found) > 5 else ""
    return (
        f"refusing to {what} run {found[0].run_id!r}: it holds what looks like a secret at "
        f"{shown}{more}. Record the run with redact=[...] paths for these values, or pass "
        f"{flag} to write them as they are (only for a reader who may see them)."
    )
