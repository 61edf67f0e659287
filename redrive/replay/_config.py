"""A run's options, checked once: :class:`RunConfig` (what ``redrive.run(**options)`` chose).

Every option is validated before anything is written; the result is frozen
and read by every part of a Run (:mod:`._run`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from typing import Any, Literal, TypedDict

import attrs

from .._runid import check_run_id
from .._secrets_policy import keep_by_kind
from ..storage import Journal
from ._fingerprint import current_tools
from ._lease import lease_for, takeover_grace
from ._policy import ReplayPolicy, compile_paths
from ._usage import Budget, Price, prices_of

__all__ = ["RunConfig", "RunOptions", "live_tool_names", "unknown_live_tools"]

#: The ``input`` of a run that was given none (no input check on resume).
UNSET: Any = object()
_DEFAULT_RETRYABLE: tuple[type[BaseException], ...] = (ConnectionError, TimeoutError)


@functools.cache
def redrive_version() -> str:
    """This redrive's version (``"0"`` in a source checkout without metadata).

    Read once per process: each read scans ``sys.path`` for the installed metadata,
    and every new run's start records it twice. ``importlib.metadata`` (with the
    zipfile, email and csv modules under it) is imported here, not with the engine.
    """
    import importlib.metadata

    try:
        return importlib.metadata.version("redrive")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - source checkout
        return "0"


class RunOptions(TypedDict, total=False):
    """The keyword options of :func:`redrive.run`, all optional (see it for their meaning).

    ``run(journal, run_id, **options)`` is typed by this dict: a misspelt
    option, or one of the wrong type, fails ``mypy --strict``; at run time it
    raises ``TypeError`` before anything is written.
    """

    input: Any
    replay: Literal["strict", "lenient"] | ReplayPolicy
    on_in_flight: Literal["raise", "tell_model"]
    max_attempts: int
    lease: float | Literal["auto"] | None
    on_busy: Literal["raise", "wait"]
    busy_timeout: float
    create: bool
    live: bool
    redact: tuple[str, ...]
    keep: tuple[str, ...]
    model_commit: Literal["write", "group", "each"]
    retryable: tuple[type[BaseException], ...]
    entrypoint: str | None
    app_version: str | None
    live_tools: bool | tuple[str, ...] | list[str]
    max_tokens: int | None
    max_cost: float | None
    prices: Mapping[str, Price | Mapping[str, float]]


def unknown_live_tools(live_tools: Any, recorded: Iterable[str] = ()) -> str | None:
    """Say which ``live_tools`` names match no tool, or None when every name does.

    A name is known when a tool of that name was defined in this process
    (``@redrive.tool``) or appears in ``recorded``.

    Args:
        live_tools: ``True``/``False`` (never unknown) or the tool names asked for.
        recorded: tool names seen in the journal (steps recorded or called).

    Returns:
        A sentence naming each unknown name, its close matches and the known
        tool names, with the fix; or None.
    """
    if isinstance(live_tools, bool):
        return None
    known = sorted(set(current_tools()) | set(recorded))
    unknown = sorted(set(live_tools) - set(known))
    if not unknown:
        return None
    import difflib  # only to name the tools a misspelt name meant

    hints = []
    for name in unknown:
        close = difflib.get_close_matches(name, known, n=1)
        hints.append(f"{name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    return (
        f"live_tools names {', '.join(hints)} match no tool, so no body ran live for them; "
        f"the known tools are {', '.join(map(repr, known)) or 'none'}. Fix the name in "
        "live_tools (redrive.run's option, the redrive marker or --redrive-live-tools)."
    )


def live_tool_names(live_tools: Any) -> bool | frozenset[str]:
    """Check and normalize ``live_tools``: True/False, or the set of tool names.

    Raises:
        TypeError: neither a bool nor a sequence of tool names (a bare string is
            refused: ``live_tools="send_email"`` would read as its letters).
    """
    if isinstance(live_tools, bool):
        return live_tools
    if isinstance(live_tools, str) or not isinstance(live_tools, tuple | list | frozenset | set):
        raise TypeError(
            f"live_tools={live_tools!r}: use True (every tool), False (none) or a list of "
            "tool names such as ['create_refund']"
        )
    if not all(isinstance(n, str) and n for n in live_tools):
        raise TypeError(f"live_tools={live_tools!r}: every tool name must be a non-empty string")
    return frozenset(live_tools)


def _check_types(options: dict[str, Any]) -> None:
    """Refuse option values of the wrong type before anything is written (TypeError/ValueError)."""
    if options["on_in_flight"] not in ("raise", "tell_model"):
        raise ValueError(f"on_in_flight={options['on_in_flight']!r}: use 'raise' or 'tell_model'")
    if options["on_busy"] not in ("raise", "wait"):
        raise ValueError(f"on_busy={options['on_busy']!r}: use 'raise' or 'wait'")
    if options["model_commit"] not in ("write", "group", "each"):
        raise ValueError(
            f"model_commit={options['model_commit']!r}: use 'write' (default), 'group' or 'each'"
        )
    max_attempts = options["max_attempts"]
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
        raise TypeError(f"max_attempts={max_attempts!r}: use an int of at least 1")
    for option in ("lease", "busy_timeout"):
        value = options[option]
        if option == "lease" and (value is None or value == "auto"):
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            also = ", 'auto' (the default) or None" if option == "lease" else ""
            raise TypeError(f"{option}={value!r}: use a positive number of seconds{also}")
    for option in ("create", "live"):
        if not isinstance(options[option], bool):
            raise TypeError(f"{option}={options[option]!r}: use True or False")
    redact = options["redact"]
    if isinstance(redact, str) or not all(isinstance(p, str) for p in redact):
        raise TypeError(f"redact={redact!r}: use a tuple of path patterns (strings)")
    keep = options["keep"]
    if isinstance(keep, str) or not all(isinstance(p, str) for p in keep):
        raise TypeError(f"keep={keep!r}: use a tuple of path patterns (strings)")
    retryable = options["retryable"]
    if not all(isinstance(t, type) and issubclass(t, BaseException) for t in retryable):
        raise TypeError(f"retryable={retryable!r}: use a tuple of exception types")
    app_version = options["app_version"]
    if app_version is not None and (not isinstance(app_version, str) or not app_version):
        raise TypeError(f"app_version={app_version!r}: use a non-empty string or None")


def _budget(options: dict[str, Any]) -> Budget:
    """The run's ``max_tokens``, ``max_cost`` and ``prices`` (TypeError, ValueError: malformed)."""
    prices = prices_of(options["prices"])
    max_tokens, max_cost = options["max_tokens"], options["max_cost"]
    if max_tokens is not None and (
        isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1
    ):
        raise TypeError(f"max_tokens={max_tokens!r}: use a positive int (input + output tokens)")
    if max_cost is not None:
        if isinstance(max_cost, bool) or not isinstance(max_cost, int | float) or max_cost <= 0:
            raise TypeError(f"max_cost={max_cost!r}: use a positive number (the prices' currency)")
        if not prices:
            raise ValueError(
                "max_cost needs prices= (model name -> redrive.Price per million tokens): "
                "redrive knows no prices"
            )
    return Budget(max_tokens=max_tokens, max_cost=max_cost, prices=prices)


def _checked_keep(keep: tuple[str, ...]) -> tuple[str, ...]:
    """Refuse a ``keep`` pattern with an unknown step kind or a bad path (ValueError)."""
    keep_by_kind(keep, compile_paths)
    return keep


#: The defaults of :class:`RunOptions` (see :func:`redrive.run`).
OPTION_DEFAULTS: dict[str, Any] = {
    "input": UNSET,
    "replay": "strict",
    "on_in_flight": "raise",
    "max_attempts": 3,
    "lease": "auto",
    "on_busy": "raise",
    "busy_timeout": 30.0,
    "create": True,
    "live": True,
    "redact": (),
    "keep": (),
    "model_commit": "write",
    "retryable": _DEFAULT_RETRYABLE,
    "entrypoint": None,
    "app_version": None,
    "live_tools": False,
    "max_tokens": None,
    "max_cost": None,
    "prices": {},
}


@attrs.frozen(kw_only=True)
class RunConfig:
    """What a run's options chose, checked (see :func:`redrive.run` for each option).

    Attributes:
        journal: where the run's frames live.
        run_id: the run's id (checked by the run-id rule).
        policy: the replay policy.
        input: the run's input as given (:data:`UNSET` when none was).
        redact: the ``redact`` path patterns as given.
        redact_paths: the same, compiled.
        keep: the ``keep`` path patterns as given (checked).
        live_tools: True/False, or the set of tool names whose bodies run on replay.
        lease: the lease length this run takes, in seconds, ``"auto"`` resolved
            (:func:`~._lease.lease_for`); None: none.
    """

    journal: Journal
    run_id: str
    policy: ReplayPolicy
    input: Any
    on_in_flight: Literal["raise", "tell_model"]
    max_attempts: int
    lease: float | None
    on_busy: Literal["raise", "wait"]
    busy_timeout: float
    create: bool
    live: bool
    redact: tuple[str, ...]
    redact_paths: tuple[re.Pattern[str], ...]
    keep: tuple[str, ...]
    model_commit: Literal["write", "group", "each"]
    retryable: tuple[type[BaseException], ...]
    entrypoint: str | None
    app_version: str | None
    live_tools: bool | frozenset[str]
    budget: Budget = attrs.field(factory=Budget)

    @classmethod
    def of(cls, journal: Journal, run_id: str, options: RunOptions) -> RunConfig:
        """Check ``options`` (missing ones take their defaults) and freeze them.

        Raises:
            TypeError: an unknown option, or an option of the wrong type.
            ValueError: ``run_id`` breaks the run-id rule, or an option has a
                value outside its choices.
        """
        unknown = sorted(set(options) - set(OPTION_DEFAULTS))
        if unknown:
            raise TypeError(
                f"redrive.run() got unknown option(s) {', '.join(map(repr, unknown))}; the "
                f"options are {', '.join(sorted(OPTION_DEFAULTS))}"
            )
        check_run_id(run_id)
        chosen = {**OPTION_DEFAULTS, **options}
        _check_types(chosen)
        redact = tuple(chosen["redact"])
        lease = lease_for(chosen["lease"], journal, live=chosen["live"])
        busy_timeout = chosen["busy_timeout"]
        if "busy_timeout" not in options and lease is not None:
            # waiting for a dead holder lasts its lease plus the takeover grace: by default,
            # wait that long (a lease of 30 s would otherwise outlast a 30 s wait)
            busy_timeout = max(busy_timeout, lease + takeover_grace(lease) + 1.0)
        return cls(
            journal=journal,
            run_id=run_id,
            policy=ReplayPolicy.of(chosen["replay"]),
            input=chosen["input"],
            on_in_flight=chosen["on_in_flight"],
            max_attempts=chosen["max_attempts"],
            lease=lease,
            on_busy=chosen["on_busy"],
            busy_timeout=busy_timeout,
            create=chosen["create"],
            live=chosen["live"],
            redact=redact,
            redact_paths=compile_paths(redact),
            keep=_checked_keep(tuple(chosen["keep"])),
            model_commit=chosen["model_commit"],
            retryable=tuple(chosen["retryable"]),
            entrypoint=chosen["entrypoint"],
            app_version=chosen["app_version"],
            live_tools=live_tool_names(chosen["live_tools"]),
            budget=_budget(chosen),
        )
