"""The OpenAI Agents SDK (``openai-agents``): recorded models and function tools.

Models: the SDK's model classes take the OpenAI client to use, so hand them a
wrapped one; every Chat Completions or Responses request of a run (streamed
runs included) is then a model step::

    client = redrive.wrap(AsyncOpenAI())
    model = OpenAIChatCompletionsModel(model="gpt-4o", openai_client=client)
    model = OpenAIResponsesModel(model="gpt-4o", openai_client=client)

(``OpenAIChatCompletionsModel(model, openai_client)`` and
``OpenAIResponsesModel(model, openai_client)`` are the SDK's documented hook
for a custom client: https://openai.github.io/openai-agents-python/models/.)
``agents.set_default_openai_client(client)`` does the same for agents that
name their model by string.

Tools: :func:`function_tool` is the SDK's ``agents.function_tool`` over a
:func:`redrive.tool`, so the tool's call is claimed before its body runs and
its result journaled; on resume or replay the recorded result is handed to
the agent and the body does not run again.

Sessions: wrap a session in :class:`RecordedSession` (``Runner.run(agent, text,
session=RecordedSession(SQLiteSession(...)))``). The session owns the
conversation before a run starts; redrive owns what the run writes: a resumed
run reads the history the interrupted attempt read, and an item that attempt
already stored is not stored twice (see :mod:`redrive.integrations.agents_session`).
A bare session under a redrive run is refused when ``Runner.run`` is called,
before any model call (:class:`UnrecordedSessionError`): on resume it would
send its stored items plus the input again, which the journal never saw
(see :mod:`redrive.integrations._agents_runner`).

Tracing: the SDK exports traces to OpenAI by default, with its own HTTP
client (not a model step); ``agents.set_tracing_disabled(True)`` turns that
off where there is no network (tests, offline replay).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, overload

from ..errors import RecordedToolError, ReplayError
from ..replay import Recovery
from ._common import hide_key, missing_extra, recorded_tool
from .agents_session import RecordedSession, SessionHistoryError

try:
    import agents
    from agents import RunContextWrapper
    from agents.tool_context import ToolContext
except ImportError as err:  # pragma: no cover - exercised without the extra
    raise missing_extra("openai-agents", "agents", err) from err

from ._agents_runner import UnrecordedSessionError, install
from ._agents_state import ForeignRunStateError

__all__ = [
    "ForeignRunStateError",
    "RecordedSession",
    "SessionHistoryError",
    "UnrecordedSessionError",
    "function_tool",
]

install()

_DEFAULT: Any = object()


def _passing_redrive_errors(handler: Any) -> Callable[[Any, Exception], Any]:
    """Return a ``failure_error_function`` that lets redrive's own errors reach the caller.

    The SDK hands a tool's exception to ``failure_error_function`` and sends
    what it returns to the model as the tool's output (by default a fixed
    "An error occurred..." text). A redrive error raised by the tool step (a
    blocked retry of a side effect, a divergence, a replay miss, a lost run
    context, a journal write failure) is not the tool's answer: told to the
    model, the agent would go on live past a step that never ran. Those are
    raised again (the SDK lets an exception from the handler end the run);
    a tool's own recorded error (:class:`redrive.RecordedToolError` included)
    goes to ``handler`` as before: the SDK's default, the user's, or None (raise).
    """

    def on_failure(ctx: Any, error: Exception) -> Any:
        cause: BaseException | None = error
        while cause is not None:
            if isinstance(cause, ReplayError) and not isinstance(cause, RecordedToolError):
                raise cause
            cause = cause.__cause__
        if handler is _DEFAULT:
            return agents.default_tool_error_function(ctx, error)
        if handler is None:
            raise error
        return handler(ctx, error)

    return on_failure


@overload
def function_tool(fn: Callable[..., Any], /) -> agents.FunctionTool: ...


@overload
def function_tool(
    fn: None = None,
    /,
    *,
    name: str | None = None,
    restart_safe: bool | None = None,
    read_only: bool = False,
    recover: Callable[[dict[str, Any], str], Recovery] | None = None,
    retryable: tuple[type[BaseException], ...] = (),
    **options: Any,
) -> Callable[[Callable[..., Any]], agents.FunctionTool]: ...


def function_tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    restart_safe: bool | None = None,
    read_only: bool = False,
    recover: Callable[[dict[str, Any], str], Recovery] | None = None,
    retryable: tuple[type[BaseException], ...] = (),
    **options: Any,
) -> agents.FunctionTool | Callable[[Callable[..., Any]], agents.FunctionTool]:
    """Make a function an Agents SDK function tool whose calls are redrive tool steps.

    Use bare (``@function_tool``) or with options, in place of
    ``agents.function_tool``. The function (sync or async) is made a
    :func:`redrive.tool` with ``name``, ``restart_safe``, ``read_only``,
    ``recover`` and ``retryable`` (same meaning as there), then handed to
    ``agents.function_tool`` (https://openai.github.io/openai-agents-python/tools/#function-tools),
    which builds the JSON schema from its signature and docstring as usual;
    ``options`` go to ``agents.function_tool`` (``description_override``,
    ``failure_error_function``, ``strict_mode``...); redrive's own errors
    (:class:`redrive.ReplayError`: a blocked retry of an in-flight side
    effect, a divergence...) are raised to the caller instead of being told to
    the model by the ``failure_error_function``, whose other errors it handles
    as usual. The tool's name as the
    model sees it and its step name are both ``name`` or the function's name.

    A parameter named ``idempotency_key`` is filled in by redrive and left out
    of the schema the model sees.

    Args:
        fn: the tool function, when used bare.
        name: the tool's name (default: the function's ``__name__``).
        restart_safe: see :func:`redrive.tool` (None guesses from the name; fails closed).
        read_only: see :func:`redrive.tool`.
        recover: see :func:`redrive.tool`.
        retryable: see :func:`redrive.tool`.
        **options: keyword arguments for ``agents.function_tool``.

    Returns:
        An ``agents.FunctionTool`` (or, without ``fn``, a decorator that makes one).

    Raises:
        TypeError: the function's first parameter takes the SDK's
            ``RunContextWrapper`` / ``ToolContext`` (a run context cannot be
            journaled as an argument), or an option is invalid for
            :func:`redrive.tool`.
    """

    def build(func: Callable[..., Any]) -> agents.FunctionTool:
        wrapped = recorded_tool(
            func,
            framework="openai-agents",
            context_types=(RunContextWrapper, ToolContext),
            name=name,
            restart_safe=restart_safe,
            read_only=read_only,
            recover=recover,
            retryable=retryable,
        )
        tool_name = name or func.__name__
        made: agents.FunctionTool = agents.function_tool(
            hide_key(wrapped),
            name_override=tool_name,
            failure_error_function=_passing_redrive_errors(
                options.pop("failure_error_function", _DEFAULT)
            ),
            **options,
        )
        return made

    if fn is not None:
        return build(fn)
    return build
