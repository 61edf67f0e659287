"""Replay policy, volatile-field stripping and redaction (pure, no I/O)."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from typing import Any, Literal

import attrs

__all__ = [
    "REDACTED",
    "Rule",
    "ReplayPolicy",
    "compile_paths",
    "match_view",
    "redact_paths",
]

Rule = Literal["strict", "warn", "lenient"]
_RULES = ("strict", "warn", "lenient")

#: What a redacted value is replaced with in every journal.
REDACTED = "[REDACTED]"

#: Keys that carry ids minted by a model or a transport; never part of a match.
VOLATILE_KEYS = frozenset({"tool_call_id", "tool_use_id", "call_id", "idempotency_key"})
#: Object types whose ``id`` field is minted by the model.
_ID_TYPES = frozenset({"function", "tool_use", "function_call", "server_tool_use", "tool_call"})


@functools.lru_cache(maxsize=256)
def _compile(pattern: str) -> re.Pattern[str]:
    if not pattern.startswith("$"):
        pattern = "$." + pattern
    text = re.escape(pattern)
    text = text.replace(r"\.\.", "(?:\\..+)?\\.")
    text = text.replace(r"\[\*\]", r"\[\d+\]")
    text = text.replace(r"\*", r"[^.\[\]]+")
    return re.compile(text + r"\Z")


def compile_paths(patterns: Iterable[str]) -> tuple[re.Pattern[str], ...]:
    """Compile JSON-path-like patterns: ``$.a.b``, ``$.items[*].id``, ``$..timestamp``, ``*``.

    Raises:
        TypeError: a pattern is not a string.
    """
    out = []
    for pattern in patterns:
        if not isinstance(pattern, str):
            raise TypeError(f"path pattern {pattern!r} is not a string")
        out.append(_compile(pattern))
    return tuple(out)


def _child(path: str, key: Any) -> str:
    if isinstance(key, str) and key.isidentifier():
        return f"{path}.{key}"
    return f"{path}[{key!r}]"


def _walk(
    value: Any, path: str, patterns: tuple[re.Pattern[str], ...], *, drop: bool, ids: bool
) -> Any:
    if isinstance(value, dict):
        out = {}
        id_holder = ids and (value.get("type") in _ID_TYPES or "function" in value)
        for key, item in value.items():
            where = _child(path, key)
            if ids and (key in VOLATILE_KEYS or (key == "id" and id_holder)):
                continue
            if patterns and any(p.match(where) for p in patterns):
                if drop:
                    continue
                out[key] = REDACTED
                continue
            out[key] = _walk(item, where, patterns, drop=drop, ids=ids)
        return out
    if isinstance(value, list):
        return [
            _walk(item, f"{path}[{i}]", patterns, drop=drop, ids=ids)
            for i, item in enumerate(value)
        ]
    return value


def match_view(
    args: Any, ignore: tuple[re.Pattern[str], ...] = (), *, kind: str = "model"
) -> Any:
    """Return canonical ``args`` without what must not decide a match.

    For model requests (``kind="model"``) drops model-minted ids
    (``tool_call_id``, ``tool_use_id``, ``call_id``, the ``id`` of tool-call
    objects): a resumed conversation may carry other ids for the same calls.
    A tool's or value's own arguments keep every field (an argument named
    ``call_id`` is data). For every kind, drops each path matching ``ignore``.
    """
    return _walk(args, "$", ignore, drop=True, ids=kind == "model")


def redact_paths(args: Any, patterns: tuple[re.Pattern[str], ...]) -> Any:
    """Return canonical ``args`` with each value at a matching path replaced by ``[REDACTED]``."""
    if not patterns:
        return args
    return _walk(args, "$", patterns, drop=False, ids=False)


def _paths(value: Iterable[str]) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    return tuple(value)


@attrs.frozen(kw_only=True)
class ReplayPolicy:
    """How recorded steps are matched on replay, per step kind.

    Each of ``tool``, ``model`` and ``value`` is one of:

    * ``"strict"``: the step must equal (kind, name, key) a recorded step of
      the same turn (the steps issued after the same model response, which may
      arrive in any order); otherwise :class:`~redrive.errors.DivergenceError`.
    * ``"warn"``: as strict, but a step whose name matches and whose arguments
      drifted replays the recorded outcome and emits a
      :class:`~redrive.ReplayDriftWarning` with the diff.
    * ``"lenient"``: the step is matched by content among all unconsumed
      recorded steps (each consumed once); with no match it runs live.

    Attributes:
        tool, model, value: the rule per step kind.
        ignore: path patterns left out of matching (``$.body.metadata.request_id``,
            ``$..timestamp``, ``$.messages[*].name``); the paths are of the
            step's canonical arguments.
    """

    tool: Rule = "strict"
    model: Rule = "strict"
    value: Rule = "strict"
    ignore: tuple[str, ...] = attrs.field(default=(), converter=_paths)

    def __attrs_post_init__(self) -> None:
        for kind in ("tool", "model", "value"):
            rule = getattr(self, kind)
            if rule not in _RULES:
                raise ValueError(
                    f"replay policy for {kind} steps is {rule!r}; use one of {', '.join(_RULES)}"
                )
        compile_paths(self.ignore)

    @classmethod
    def of(cls, replay: str | ReplayPolicy) -> ReplayPolicy:
        """Return the policy for ``"strict"``, ``"lenient"``, or a policy as is.

        Raises:
            ValueError: an unknown policy name.
        """
        if isinstance(replay, ReplayPolicy):
            return replay
        if replay not in ("strict", "lenient"):
            raise ValueError(
                f"replay={replay!r}: use 'strict', 'lenient' or a redrive.ReplayPolicy(...)"
            )
        return cls(tool=replay, model=replay, value=replay)  # type: ignore[arg-type]

    def rule(self, kind: str) -> Rule:
        """Return the rule for a step kind (``"tool"``, ``"model"``, ``"value"``)."""
        rule: Rule = getattr(self, kind)
        return rule

    @property
    def ignore_patterns(self) -> tuple[re.Pattern[str], ...]:
        """The compiled ``ignore`` patterns."""
        return compile_paths(self.ignore)
