"""A run's secrets policy: which step kinds keep which paths, and the record of the policy.

``redrive.run(..., keep=("model:$..logprobs",))`` names paths whose values the
default secret rules (:mod:`redrive._scrub`: credential names, secret-looking
text) leave verbatim, each optionally for one step kind (``run``, ``model``,
``tool``, ``value``, ``note``; no prefix: every kind). ``redact=`` paths still
apply there. What a run applied is recorded in its ``run_start`` flags as
``secrets`` (:func:`secrets_policy`).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

import xxhash

from ._credentials import CREDENTIALS
from ._signed import SIGNED_TYPES
from .frames import Kind

__all__ = ["STEP_KINDS", "keep_by_kind", "secrets_policy"]

#: Frame kind -> the step kind its ``keep=`` patterns are chosen by.
STEP_KINDS = {
    Kind.RUN_START.value: "run",
    Kind.RUN_END.value: "run",
    Kind.MODEL_REQUEST.value: "model",
    Kind.MODEL_RESPONSE.value: "model",
    Kind.TOOL_START.value: "tool",
    Kind.TOOL_DONE.value: "tool",
    Kind.TOOL_ERROR.value: "tool",
    Kind.VALUE.value: "value",
    Kind.NOTE.value: "note",
}


@functools.cache
def _rules_table() -> str:
    """The digest of the default rules: the credential table and the signed types (constants).

    Computed once a process: every run's scrubber records it.
    """
    rules = json.dumps(
        [[n, sorted(f), src] for n, f, src in CREDENTIALS] + [sorted(SIGNED_TYPES)],
        separators=(",", ":"),
    )
    return xxhash.xxh3_64_hexdigest(rules.encode())


def secrets_policy(given: Mapping[str, Any]) -> dict[str, Any]:
    """The record of a secrets policy: ``given`` (its ``redact``, ``keep``) with its digests."""
    table = _rules_table()
    redact = [str(p) for p in given.get("redact", ())]
    keep = [str(p) for p in given.get("keep", ())]
    whole = json.dumps([table, redact, keep], separators=(",", ":"))
    return {
        "fingerprint": xxhash.xxh3_64_hexdigest(whole.encode()),
        "table": table,
        "redact": redact,
        "keep": keep,
    }


def keep_by_kind(
    patterns: Iterable[str], compile_paths: Any
) -> dict[str, tuple[re.Pattern[str], ...]]:
    """Group ``keep=`` patterns by step kind (every kind's get the unprefixed ones).

    Args:
        patterns: ``"$.path"`` or ``"<kind>:$.path"`` strings.
        compile_paths: the path compiler (``redrive.replay._policy.compile_paths``).

    Returns:
        step kind -> compiled patterns (kinds without any are left out).

    Raises:
        ValueError: an unknown step kind prefix, or a path ``compile_paths`` refuses.
        TypeError: a pattern that is not a string.
    """
    kinds = sorted(set(STEP_KINDS.values()))
    grouped: dict[str, list[str]] = {kind: [] for kind in kinds}
    for pattern in patterns:
        if not isinstance(pattern, str):
            raise TypeError(f"keep={pattern!r}: use path patterns (strings) such as '$..logprobs'")
        kind, colon, path = pattern.partition(":")
        if not colon or kind.strip().startswith("$"):
            for each in kinds:
                grouped[each].append(pattern)
        elif kind.strip() in grouped:
            grouped[kind.strip()].append(path.strip())
        else:
            raise ValueError(
                f"keep pattern {pattern!r}: {kind!r} is not a step kind; use one of "
                f"{', '.join(kinds)} (e.g. 'model:$..logprobs'), or no prefix for every kind"
            )
    return {kind: compile_paths(paths) for kind, paths in grouped.items() if paths}
