"""Replay policy, volatile-field stripping and redaction (pure, no I/O).

Redaction itself is :mod:`redrive._scrub` (one scrubber for every payload); this
module compiles the ``redact=`` and ``ignore`` path patterns it uses.
"""

from __future__ import annotations

import ast
import functools
import os
import re
from collections.abc import Iterable
from typing import Any, Literal

import attrs

from .._scrub import REDACTED, Scrubber
from .._secrets_policy import keep_by_kind

__all__ = [
    "REDACTED",
    "Rule",
    "ReplayPolicy",
    "compile_paths",
    "match_view",
    "last_name",
    "redact_paths",
    "scrubber",
    "set_default_on_drift",
]

Rule = Literal["strict", "warn", "lenient"]
_RULES = ("strict", "warn", "lenient")
OnDrift = Literal["raise", "continue_live"]
_ON_DRIFT = ("raise", "continue_live")
#: Environment variable naming the deployment's default ``on_drift``.
ON_DRIFT_ENV = "REDRIVE_ON_DRIFT"
_default_on_drift: list[OnDrift | None] = [None]


def set_default_on_drift(value: OnDrift | None) -> None:
    """Set this process's default ``ReplayPolicy.on_drift`` (a deployment-wide opt-in).

    Policies made afterwards without an explicit ``on_drift`` take it
    (``redrive.run(..., replay="strict")`` included). ``None`` goes back to
    ``$REDRIVE_ON_DRIFT``, else ``"raise"``.

    Raises:
        ValueError: not ``"raise"``, ``"continue_live"`` or None.
    """
    if value is not None and value not in _ON_DRIFT:
        raise ValueError(f"on_drift={value!r}: use 'raise' or 'continue_live'")
    _default_on_drift[0] = value


def _on_drift_default() -> OnDrift:
    if _default_on_drift[0] is not None:
        return _default_on_drift[0]
    env = os.environ.get(ON_DRIFT_ENV, "").strip()
    if env and env not in _ON_DRIFT:
        raise ValueError(f"${ON_DRIFT_ENV}={env!r}: use 'raise' or 'continue_live'")
    return env or "raise"  # type: ignore[return-value]


#: Keys that carry ids minted by a model or a transport; never part of a match.
VOLATILE_KEYS = frozenset({"tool_call_id", "tool_use_id", "call_id", "idempotency_key"})
#: Object types whose ``id`` field is minted by the model.
_ID_TYPES = frozenset({"function", "tool_use", "function_call", "server_tool_use", "tool_call"})


#: One child step of a rendered path: ``.name`` (identifier keys) or ``[...]``
#: (list indexes, int keys, and ``repr`` of other str keys), as ``_child`` writes.
_ANY_CHILD = r"""(?:\.[^.\[]+|\[(?:-?\d+|'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")\])"""

_PATTERN_HELP = (
    "write segments as .name, ['any key'], [3] or [*], with .. for any depth,"
    " e.g. $.metadata['x-secret'], $.messages[*].content, $..api-key"
)


def _key_regex(name: str, *, glob: bool) -> str:
    """Regex for the child ``name`` as the walker renders it (see ``_child``)."""
    if glob and "*" in name:
        # A glob inside a name (``tool_*``): match either rendering of the key.
        plain = "[^.\\[]*".join(re.escape(part) for part in name.split("*"))
        quoted = "(?:[^'\\\\]|\\\\.)*".join(re.escape(repr(part)[1:-1]) for part in name.split("*"))
        return rf"(?:\.{plain}|\['{quoted}'\])"
    if name.isidentifier():
        return r"\." + re.escape(name)
    regex = r"\[" + re.escape(repr(name)) + r"\]"
    if re.fullmatch(r"-?\d+", name):
        # ``.0`` may mean the str key "0" or list index 0: redact either.
        regex = rf"(?:{regex}|\[{int(name)}\])"
    return regex


def _segments(pattern: str) -> list[str]:
    """Split a path pattern into child regexes (``..`` becomes its own item)."""
    out: list[str] = []
    i, n = 1, len(pattern)
    while i < n:
        if pattern.startswith("..", i):
            out.append("..")
            i += 2
            if i >= n:
                raise ValueError("'..' must be followed by a name, * or [...]")
            if pattern[i] == ".":
                raise ValueError(f"'...' at offset {i - 2}")
            if pattern[i] != "[":
                i -= 1  # the name after '..' is read like one after '.'
            continue
        char = pattern[i]
        if char == ".":
            j = i + 1
            while j < n and pattern[j] not in ".[":
                j += 1
            name = pattern[i + 1 : j]
            if not name:
                raise ValueError(f"empty name at offset {i}")
            out.append(_ANY_CHILD if name == "*" else _key_regex(name, glob=True))
            i = j
        elif char == "[":
            j = i + 1
            if j < n and pattern[j] in "'\"":
                quote, k = pattern[j], j + 1
                while k < n and pattern[k] != quote:
                    k += 2 if pattern[k] == "\\" else 1
                if k >= n:
                    raise ValueError(f"unclosed quote at offset {j}")
                try:
                    name = ast.literal_eval(pattern[j : k + 1])
                except (ValueError, SyntaxError):
                    raise ValueError(f"bad quoted name at offset {j}") from None
                regex, end = _key_regex(str(name), glob=False), k + 1
            else:
                end = pattern.find("]", j)
                if end < 0:
                    raise ValueError(f"unclosed '[' at offset {i}")
                inner = pattern[j:end].strip()
                if inner == "*":
                    regex = _ANY_CHILD
                elif re.fullmatch(r"-?\d+", inner):
                    regex = rf"\[{int(inner)}\]"
                else:
                    raise ValueError(f"[{inner}] is neither [*], an index nor a quoted name")
            if end >= n or pattern[end] != "]":
                raise ValueError(f"expected ']' at offset {end}")
            out.append(regex)
            i = end + 1
        else:
            raise ValueError(f"unexpected {char!r} at offset {i}")
    return out


@functools.lru_cache(maxsize=256)
def _compile(pattern: str) -> re.Pattern[str]:
    text = pattern.strip()
    if not text.startswith("$"):
        text = ("$" if text.startswith((".", "[")) else "$.") + text
    try:
        segments = _segments(text)
    except ValueError as exc:
        raise ValueError(f"path pattern {pattern!r} is not valid: {exc}; {_PATTERN_HELP}") from None
    regex = r"\$" + "".join(f"{_ANY_CHILD}*" if seg == ".." else seg for seg in segments)
    return re.compile(regex + r"\Z")


def compile_paths(patterns: Iterable[str]) -> tuple[re.Pattern[str], ...]:
    """Compile JSON-path-like patterns into matchers of the walker's rendered paths.

    A pattern is ``$`` (optional) and segments: ``.name`` or ``['name']``
    (both spellings work for every key: ``$.a.api-key`` and
    ``$.a['api-key']`` are the same pattern), ``[3]`` (an index or int key),
    ``.*`` or ``[*]`` (any one child), ``..`` (any depth, including none:
    ``$..token``), and ``*`` inside a name as a glob (``$.tool_*``). A pattern
    without ``$`` is relative to the root (``a.b`` is ``$.a.b``).

    Returns:
        One compiled regex per pattern, matched against paths such as
        ``$.messages[0]['x-id']``.

    Raises:
        TypeError: a pattern is not a string.
        ValueError: a pattern is malformed (an unclosed ``[`` or quote, an
            empty name, a trailing ``..``); a redaction that can never match
            is refused rather than silently leaking.
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
        kind = value.get("type")
        # ``type`` is any JSON (a schema's ``["string", "null"]``, a property named
        # ``type``): only a string names an object type; anything else is data
        id_holder = ids and ((isinstance(kind, str) and kind in _ID_TYPES) or "function" in value)
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
        out_list = []
        for i, item in enumerate(value):
            where = f"{path}[{i}]"
            if not drop and patterns and any(p.match(where) for p in patterns):
                out_list.append(REDACTED)  # ``$.keys[*]``: each item is the secret
            else:
                out_list.append(_walk(item, where, patterns, drop=drop, ids=ids))
        return out_list
    return value


#: What :func:`_without_ids` descends into (a tuple: ``isinstance`` on it is the fast form).
_NESTS = (dict, list)


def _without_ids(value: Any) -> Any:
    """:func:`_walk` without patterns, for ids only: ``value`` itself where nothing is dropped.

    No path strings are built (only patterns read them) and no part that
    keeps every field is copied: a request without model-minted ids costs one
    look at each map and list, and builds nothing.
    """
    if isinstance(value, dict):
        kind = value.get("type")
        id_holder = (isinstance(kind, str) and kind in _ID_TYPES) or "function" in value
        out: dict[Any, Any] | None = None  # made at the first change, with the keys before it
        for key, item in value.items():
            if key in VOLATILE_KEYS or (key == "id" and id_holder):
                if out is None:
                    out = _before(value, key)
                continue
            if isinstance(item, _NESTS):
                new = _without_ids(item)
                if new is not item and out is None:
                    out = _before(value, key)
            else:
                new = item
            if out is not None:
                out[key] = new
        return value if out is None else out
    if isinstance(value, list):
        for i, item in enumerate(value):
            if isinstance(item, _NESTS):
                new = _without_ids(item)
                if new is not item:
                    rest = value[i + 1 :]
                    tail = [_without_ids(v) if isinstance(v, _NESTS) else v for v in rest]
                    return [*value[:i], new, *tail]
        return value
    return value


def _before(value: dict[Any, Any], stop: Any) -> dict[Any, Any]:
    """A copy of the items of ``value`` before key ``stop`` (met while iterating it)."""
    out = {}
    for key, item in value.items():
        if key is stop:
            break
        out[key] = item
    return out


def match_view(args: Any, ignore: tuple[re.Pattern[str], ...] = (), *, kind: str = "model") -> Any:
    """Return canonical ``args`` without what must not decide a match.

    For model requests (``kind="model"``) drops model-minted ids
    (``tool_call_id``, ``tool_use_id``, ``call_id``, the ``id`` of tool-call
    objects): a resumed conversation may carry other ids for the same calls.
    A tool's or value's own arguments keep every field (an argument named
    ``call_id`` is data). For every kind, drops each path matching ``ignore``.

    Without ``ignore`` patterns the result shares every part that keeps all
    its fields with ``args`` (``args`` itself when nothing is dropped): it is
    for reading (keys, diffs), not for changing.
    """
    if not ignore:
        return _without_ids(args) if kind == "model" else args
    return _walk(args, "$", ignore, drop=True, ids=kind == "model")


def redact_paths(args: Any, patterns: tuple[re.Pattern[str], ...]) -> Any:
    """Return canonical ``args`` with each value at a matching path replaced by ``[REDACTED]``.

    The patterns alone; what the journal holds is scrubbed further by
    :class:`redrive._scrub.Scrubber` (credential fields, secret-looking text).
    """
    if not patterns:
        return args
    return Scrubber(patterns, defaults=False).value(args)


def last_name(pattern: str) -> str | None:
    """Return the field name a path pattern ends with (``$..token`` -> ``token``), if any.

    ``None`` for a pattern ending in an index, ``*`` or a glob.
    """
    text = pattern.strip()
    quoted = re.search(r"""\[(?P<q>['"])(?P<name>(?:\\.|(?!(?P=q)).)*)(?P=q)\]$""", text)
    if quoted is not None:
        try:
            return str(ast.literal_eval(quoted["q"] + quoted["name"] + quoted["q"]))
        except (ValueError, SyntaxError):
            return None
    tail = re.split(r"[.\]]", text)[-1]
    if not tail or "*" in tail or "[" in tail or tail == "$" or re.fullmatch(r"-?\d+", tail):
        return None
    return tail


def scrubber(patterns: Iterable[str], keep: Iterable[str] = ()) -> Scrubber:
    """Return the scrubber of a run's ``redact=`` and ``keep=`` patterns (:mod:`redrive._scrub`).

    The ``redact`` patterns redact by path in every payload; the field names
    they end with are masked inside texts too (an exception's message, an
    event stream). The ``keep`` patterns (:mod:`redrive._secrets_policy`)
    name paths the default rules leave verbatim, per step kind.

    Raises:
        TypeError, ValueError: as :func:`compile_paths` (and an unknown step kind in ``keep``).
    """
    patterns = tuple(patterns)
    keep = tuple(keep)
    names = [name for name in map(last_name, patterns) if name is not None]
    return Scrubber(
        compile_paths(patterns),
        names=names,
        keep=keep_by_kind(keep, compile_paths),
        policy={"redact": patterns, "keep": keep},
    )


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
      recorded steps (each consumed once); with no match it runs live, except
      a side-effecting tool call while a recorded side effect waits unreplayed
      (:class:`~redrive.errors.DivergenceError` before its body).

    ``on_drift`` says what a live run does when a recorded model step's
    request drifted (the code changed between a crash and its resume: an
    edited prompt, another model, a changed tool argument in the history):

    * ``"raise"`` (default): :class:`~redrive.errors.DivergenceError`, as the rule says.
    * ``"continue_live"``: re-ask that model step live with the new request
      and carry on; the recorded step is superseded, and a ``reasked`` note
      in the journal names it, the new request's seq and the paths that
      changed. Every completed tool step is still replayed from the journal
      (never re-run); a tool step that drifted follows the rule for tools
      (strict: ``DivergenceError``, no side effect runs); a read-only tool
      call the record lacks (a step the new code inserted) runs live, and the
      recorded steps after it still replay. When the loop
      finishes on a shorter path, recorded model and value steps and finished
      read-only tool steps it never asked for are superseded too; a side
      effect it never asked for is a divergence. Only a live run
      continues (a replay-only run, ``live=False``, raises as ``"raise"``).
      Default: :func:`set_default_on_drift`, else ``$REDRIVE_ON_DRIFT``, else
      ``"raise"``.

    Attributes:
        tool, model, value: the rule per step kind.
        ignore: path patterns left out of matching (``$.body.metadata.request_id``,
            ``$..timestamp``, ``$.messages[*].name``); the paths are of the
            step's canonical arguments.
        on_drift: ``"raise"`` or ``"continue_live"`` (see above).
    """

    tool: Rule = "strict"
    model: Rule = "strict"
    value: Rule = "strict"
    ignore: tuple[str, ...] = attrs.field(default=(), converter=_paths)
    on_drift: OnDrift = attrs.field(factory=_on_drift_default)

    def __attrs_post_init__(self) -> None:
        for kind in ("tool", "model", "value"):
            rule = getattr(self, kind)
            if rule not in _RULES:
                raise ValueError(
                    f"replay policy for {kind} steps is {rule!r}; use one of {', '.join(_RULES)}"
                )
        if self.on_drift not in _ON_DRIFT:
            raise ValueError(
                f"replay policy on_drift={self.on_drift!r}; use 'raise' or 'continue_live'"
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
