"""A small OpenAI-style tool-calling loop (chat completions).

:func:`run_agent` asks the model, executes the tool calls it returns, feeds
the results back, and stops at the first answer without tool calls::

    client = redrive.wrap(OpenAI())
    with redrive.run(journal, f"support:{job.id}", input=job.text) as run:
        result = run_agent(client, "gpt-4o-mini", messages, [lookup_customer, open_ticket])
        run.finish(result.final)

The loop has no redrive logic of its own: the model calls go through
whatever client it is given (a client wrapped by :func:`redrive.wrap` records
and replays them) and the tools are called as plain functions (a
``@redrive.tool`` records and replays itself). So the same loop is a plain
agent outside a run, and a durable, replayable one inside.

Tool schemas are built from each function's signature and docstring: the
first docstring paragraph is the description, a Google-style ``Args:``
section gives the parameter descriptions, and annotations give the JSON
types (``str``, ``int``, ``float``, ``bool``, ``list[...]``, ``dict[...]``,
``Literal[...]``, ``X | None``).
"""

from __future__ import annotations

import concurrent.futures
import contextvars
import inspect
import json
import re
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

__all__ = [
    "AgentResult",
    "AgentStep",
    "AgentTurnLimitError",
    "run_agent",
    "tool_schema",
]

_JSON_TYPES: dict[Any, str] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    list: "array",
    tuple: "array",
    dict: "object",
}


class AgentTurnLimitError(RuntimeError):
    """The model kept asking for tools past ``max_turns`` model calls.

    Attributes:
        max_turns: the limit that was reached.
        messages: the transcript so far (list of chat message dicts).
    """

    def __init__(self, message: str, *, max_turns: int, messages: list[dict[str, Any]]) -> None:
        super().__init__(message)
        self.max_turns = max_turns
        self.messages = messages


@attrs.frozen(kw_only=True)
class AgentStep:
    """One step the loop took.

    Attributes:
        kind: ``"model"`` or ``"tool"``.
        name: the model name, or the tool's name.
        arguments: the tool's decoded arguments (empty for a model step).
        result: the tool's result, or the assistant message dict of a model step.
    """

    kind: str
    name: str
    arguments: dict[str, Any] = attrs.field(factory=dict)
    result: Any = None


@attrs.frozen(kw_only=True)
class AgentResult:
    """What :func:`run_agent` returns.

    Attributes:
        final: the content of the last assistant message (the answer), or None.
        messages: the whole transcript, system and user messages included.
        steps: every model and tool step, in the order they completed.
        turns: the number of model calls made.
    """

    final: str | None
    messages: list[dict[str, Any]]
    steps: list[AgentStep]
    turns: int


def _json_type(annotation: Any) -> dict[str, Any]:
    if annotation is inspect.Parameter.empty or annotation is Any:
        return {}
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        values = list(typing.get_args(annotation))
        found = {type(v) for v in values}
        schema: dict[str, Any] = {"enum": values}
        if len(found) == 1 and next(iter(found)) in _JSON_TYPES:
            schema = {"type": _JSON_TYPES[next(iter(found))], "enum": values}
        return schema
    if origin in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(members) == 1:
            return _json_type(members[0])
        return {"anyOf": [_json_type(m) for m in members]}
    if origin in (list, tuple, Sequence):
        args = typing.get_args(annotation)
        schema = {"type": "array"}
        if args and args[0] is not Ellipsis:
            schema["items"] = _json_type(args[0])
        return schema
    if origin in (dict, Mapping):
        return {"type": "object"}
    if annotation in _JSON_TYPES:
        return {"type": _JSON_TYPES[annotation]}
    raise TypeError(
        f"no JSON schema type for the annotation {annotation!r}; annotate tool parameters with "
        "str, int, float, bool, list[...], dict[...], Literal[...] or X | None"
    )


def _doc_parts(doc: str) -> tuple[str, dict[str, str]]:
    """Split a docstring into (description, {parameter: description})."""
    text = inspect.cleandoc(doc)
    description = text.split("\n\n", 1)[0].replace("\n", " ").strip()
    params: dict[str, str] = {}
    match = re.search(r"^Args:\s*\n((?:[ \t]+.*(?:\n|$)|\s*\n)+)", text, re.MULTILINE)
    if match:
        current = None
        for line in match.group(1).splitlines():
            found = re.match(r"^\s{2,}(\w+)(?:\s*\([^)]*\))?:\s*(.*)$", line)
            if found and (current is None or len(line) - len(line.lstrip()) <= 4):
                current = found.group(1)
                params[current] = found.group(2).strip()
            elif current is not None and line.strip():
                params[current] = f"{params[current]} {line.strip()}"
    return description, params


def _name_of(fn: Callable[..., Any]) -> str:
    spec = getattr(fn, "redrive_tool", None)
    name = getattr(spec, "name", None) or getattr(fn, "__name__", None)
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", name):
        raise ValueError(
            f"tool {fn!r} has the name {name!r}; a chat-completions tool name is 1-64 letters, "
            "digits, '_' or '-' (give @redrive.tool(name=...))"
        )
    return name


def tool_schema(fn: Callable[..., Any]) -> dict[str, Any]:
    """Return the chat-completions ``tools`` entry for a function.

    Args:
        fn: a plain function or a ``@redrive.tool``; its name is the tool's
            step name, its parameters (except ``idempotency_key``) the tool's
            arguments.

    Returns:
        ``{"type": "function", "function": {"name", "description", "parameters"}}``
        with a JSON-schema ``object`` of the parameters; parameters without
        a default are ``required``.

    Raises:
        TypeError: a parameter annotation with no JSON type, or ``*args``/``**kwargs``.
        ValueError: a name that the chat-completions API does not accept.
    """
    name = _name_of(fn)
    description, docs = _doc_parts(fn.__doc__ or "")
    hints = typing.get_type_hints(fn)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for param in inspect.signature(fn).parameters.values():
        if param.name == "idempotency_key":
            continue
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise TypeError(f"tool {name!r}: *args/**kwargs have no JSON schema; name each one")
        prop = _json_type(hints.get(param.name, param.annotation))
        if param.name in docs:
            prop["description"] = docs[param.name]
        properties[param.name] = prop
        if param.default is inspect.Parameter.empty:
            required.append(param.name)
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": properties,
                "required": required,
                "additionalProperties": False,
            },
        },
    }


def _assistant_message(message: Any) -> dict[str, Any]:
    """The request form of a response's assistant message (SDK object or dict)."""

    def get(obj: Any, field: str) -> Any:
        return obj.get(field) if isinstance(obj, Mapping) else getattr(obj, field, None)

    out: dict[str, Any] = {"role": "assistant", "content": get(message, "content")}
    calls = get(message, "tool_calls") or []
    if calls:
        out["tool_calls"] = [
            {
                "id": get(call, "id"),
                "type": "function",
                "function": {
                    "name": get(get(call, "function"), "name"),
                    "arguments": get(get(call, "function"), "arguments") or "",
                },
            }
            for call in calls
        ]
    return out


def _content(result: Any) -> str:
    if isinstance(result, str):
        return result
    return json.dumps(result, sort_keys=True, ensure_ascii=False, default=str)


def _call_tool(
    tools: Mapping[str, Callable[..., Any]], call: Mapping[str, Any]
) -> tuple[dict[str, Any], Any]:
    name = call["function"]["name"]
    raw = call["function"]["arguments"]
    fn = tools.get(name)
    if fn is None:
        return {}, {"error": f"unknown tool {name!r}; available: {', '.join(sorted(tools))}"}
    try:
        arguments = json.loads(raw) if raw else {}
    except json.JSONDecodeError as exc:
        return {}, {"error": f"the arguments of {name} are not valid JSON ({exc}): {raw!r}"}
    if not isinstance(arguments, dict):
        return {}, {"error": f"the arguments of {name} must be a JSON object, not {raw!r}"}
    return arguments, fn(**arguments)


def run_agent(
    client: Any,
    model: str,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Callable[..., Any]],
    *,
    max_turns: int = 10,
    parallel: bool = True,
    max_workers: int = 4,
    **create_options: Any,
) -> AgentResult:
    """Run the tool-calling loop until the model answers without tool calls.

    Each turn calls ``client.chat.completions.create(model=..., messages=...,
    tools=[schemas], **create_options)`` (non-streaming), appends the
    assistant message, then executes its tool calls and appends one ``tool``
    message per call (results that are not strings are sent as JSON). With
    ``parallel`` and several tool calls in one response, the calls run in a
    thread pool, each in a copy of the caller's contextvars context (so the
    active :func:`redrive.run` is seen by every tool); results are appended
    in the order the model issued the calls.

    A call to an unknown tool, or with arguments that are not a JSON object,
    is answered to the model with an ``{"error": ...}`` result; an exception
    raised by a tool propagates (a redrive error, such as
    ``SideEffectRetryBlockedError`` on resume, must stop the run).

    Args:
        client: an OpenAI SDK client (``OpenAI``, or one wrapped by
            :func:`redrive.wrap`), or anything with ``chat.completions.create``.
        model: the model name sent with every request.
        messages: the opening messages (system, user...); not modified.
        tools: the tool functions (plain or ``@redrive.tool``).
        max_turns: the most model calls to make (>= 1).
        parallel: run the tool calls of one response concurrently.
        max_workers: threads for parallel tool calls.
        **create_options: more ``create`` arguments (``temperature``, ``tool_choice``...).

    Returns:
        An :class:`AgentResult` with the final answer and the transcript.

    Raises:
        AgentTurnLimitError: the model still asked for tools after ``max_turns`` calls.
        ValueError: ``max_turns`` < 1, or two tools with the same name.
        Any exception of the client or of a tool.
    """
    if max_turns < 1:
        raise ValueError(f"max_turns={max_turns}: the loop needs at least one model call")
    by_name: dict[str, Callable[..., Any]] = {}
    for fn in tools:
        name = _name_of(fn)
        if name in by_name:
            raise ValueError(f"two tools are named {name!r}; tool names must be unique")
        by_name[name] = fn
    schemas = [tool_schema(fn) for fn in tools]
    transcript: list[dict[str, Any]] = [dict(m) for m in messages]
    steps: list[AgentStep] = []
    options = dict(create_options)
    if schemas:
        options["tools"] = schemas
    for turn in range(1, max_turns + 1):
        response = client.chat.completions.create(model=model, messages=transcript, **options)
        assistant = _assistant_message(response.choices[0].message)
        transcript.append(assistant)
        steps.append(AgentStep(kind="model", name=model, result=assistant))
        calls = assistant.get("tool_calls") or []
        if not calls:
            return AgentResult(
                final=assistant.get("content"), messages=transcript, steps=steps, turns=turn
            )
        if parallel and len(calls) > 1:
            with concurrent.futures.ThreadPoolExecutor(
                max_workers=min(max_workers, len(calls)), thread_name_prefix="redrive-agent-tool"
            ) as pool:
                futures = [
                    pool.submit(contextvars.copy_context().run, _call_tool, by_name, call)
                    for call in calls
                ]
                outcomes = [future.result() for future in futures]
        else:
            outcomes = [_call_tool(by_name, call) for call in calls]
        for call, (arguments, result) in zip(calls, outcomes, strict=True):
            name = call["function"]["name"]
            steps.append(AgentStep(kind="tool", name=name, arguments=arguments, result=result))
            transcript.append(
                {"role": "tool", "tool_call_id": call["id"], "content": _content(result)}
            )
    raise AgentTurnLimitError(
        f"the model still asked for tools after {max_turns} model calls (max_turns); the last "
        "answer was a tool call. Raise max_turns, or check the prompt and tools for a loop.",
        max_turns=max_turns,
        messages=transcript,
    )
