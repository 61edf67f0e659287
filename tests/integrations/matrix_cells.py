"""The conformance matrix: framework state features x crash boundaries, and its table.

:data:`SCENARIOS` lists, per framework, the state features it documents that
the matrix drives (one scenario each, tests/integrations/matrix_drivers.py,
the later ones in matrix_more.py with their scripts in matrix_scripts.py);
another file may append scenarios (e.g. a transient-error column) before the
tests collect. Each (scenario, boundary) cell kills a real child process at
the boundary, resumes the run with the same run id and checks, from the
side-effect log outside the process and the scripted server's request count,
that nothing ran twice and the run finished; its verdict is one of
:data:`VERDICTS`. ``docs/conformance.md`` is :func:`render` of this table;
regenerate it with ``python -m tests.integrations.matrix_cells > docs/conformance.md``.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import attrs

from tests.integrations.fakeapi import FINAL, TOOL_ARGS, anthropic, chat, responses
from tests.integrations.matrix_scripts import THINKING, history, structured_lc, thinking, told
from tests.sdkserver import Reply

#: boundary -> what the kill interrupts
BOUNDARIES = {
    "model_1": "killed while the first model call is in flight",
    "in_tool": "killed inside the tool, after its side effect, before its result is journaled",
    "model_2": "killed while the model call after the tool is in flight",
    "session_write": "killed right after the framework wrote its session store",
    "before_finish": "killed after the loop returned, before `run.finish`",
    "approved": "killed after a person's approval was stored in the `RunState`, before the run "
    "is continued",
    "error_1": "the first model call answered 503; the error reaches the job, whose worker dies",
    "error_2": "the model call after the tool answered 429; the error reaches the job, "
    "whose worker dies",
}

#: boundary -> the verdict of a cell that resumed correctly
VERDICTS = {
    "model_1": "resumed: the cut model call asked again, 0 duplicates",
    "in_tool": "in-flight tool settled by its `recover()`, resumed, 0 duplicates",
    "model_2": "finished steps replayed, the cut call asked again, 0 duplicates",
    "session_write": "session items not written twice, resumed, 0 duplicates",
    "before_finish": "replayed to the end: 0 model calls, 0 tool runs",
    "approved": "the stored state continued under the same run id: the tool ran once, 0 duplicates",
    "error_1": "run left resumable; the redelivery asked again and finished, 0 duplicates",
    "error_2": "run left resumable; the redelivery replayed the tool, asked again, finished, "
    "0 duplicates",
}

#: boundaries at which the scripted server kills the child (a model call in flight)
SERVER_KILLS = {"model_1": 0, "model_2": 1}

#: boundaries at which the scripted server answers a transient error: (position, status)
SERVER_FAULTS = {"error_1": (0, 503), "error_2": (1, 429)}


@attrs.frozen
class Scenario:
    """One framework feature driven through a crash and a resume.

    Attributes:
        name: the driver's name in tests/integrations/matrix_drivers.py.
        framework: the framework's name as the table shows it.
        family: the import family (tests/integrations/conftest.py ``need``).
        feature: the documented state feature the scenario exercises.
        face: ``"sync"`` or ``"async"``; a scenario that opens its runs itself (several
            deliveries of one run id) says so: ``"async, 2 deliveries"``.
        script: the model turns the scripted server answers, in order.
        boundaries: the boundaries that apply to this scenario.
        quick: the boundaries run by default (the rest with ``REDRIVE_MATRIX=full``).
        effects: side effects a finished run has made (each exactly once).
        expect: entries the scenario's answer must have (e.g. one stored input).
        open: boundaries where the resume is known not to hold yet, each with what it does;
            the table says so, CI does not run them, ``REDRIVE_MATRIX=full`` does (and fails).
    """

    name: str
    framework: str
    family: str
    feature: str
    face: str
    script: Callable[[], list[Reply]]
    boundaries: tuple[str, ...] = ("model_1", "in_tool", "model_2", "before_finish")
    quick: tuple[str, ...] = ()
    effects: int = 1
    expect: dict[str, object] = attrs.Factory(dict)
    open: dict[str, str] = attrs.Factory(dict)


def _two(build: Callable[[bool, bool], Reply], stream: bool = False) -> Callable[[], list[Reply]]:
    return lambda: [build(False, stream), build(True, stream)]


def _chat_call(name: str, args: dict[str, object], call_id: str = "call_1") -> Reply:
    """A Chat Completions turn calling tool ``name`` with ``args``."""
    call = {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args)},
    }
    reply = chat(False)
    reply.body["choices"][0]["message"]["tool_calls"] = [call]
    return reply


def _chat_text(text: str) -> Reply:
    reply = chat(True)
    reply.body["choices"][0]["message"]["content"] = text
    return reply


def _handoff() -> list[Reply]:
    return [_chat_call("transfer_to_billing", {}, "call_0"), chat(False), chat(True)]


def _structured_agents() -> list[Reply]:
    return [chat(False), _chat_text(json.dumps({"sent": True, "summary": FINAL}))]


def _structured_pydantic() -> list[Reply]:
    return [chat(False), _chat_call("final_result", {"sent": True, "summary": FINAL}, "call_2")]


def _retry() -> list[Reply]:
    bad = {**TOOL_ARGS, "body": "sorry"}  # the tool asks for a retry: no capital letter
    return [_chat_call("send_email", bad, "call_0"), chat(False), chat(True)]


def _interrupt() -> list[Reply]:
    calls = [
        _chat_call("send_email", TOOL_ARGS, "call_1"),
        _chat_call("ask_human", {"question": "Also refund?"}, "call_2"),
    ]
    both = calls[0]
    both.body["choices"][0]["message"]["tool_calls"] += calls[1].body["choices"][0]["message"][
        "tool_calls"
    ]
    return [both, chat(True)]


_AGENTS, _PYD, _LC, _LITE = "OpenAI Agents SDK", "pydantic-ai", "LangChain / LangGraph", "litellm"
_OAI, _ANT = "OpenAI SDK", "Anthropic SDK"
_ALL = ("model_1", "in_tool", "model_2", "before_finish")

#: every scenario of the matrix; extend it (append) to add a column of features
SCENARIOS: list[Scenario] = [
    Scenario("agents-tools", _AGENTS, "agents", "tool calls, usage", "async", _two(chat)),
    Scenario("agents-sync", _AGENTS, "agents", "tool calls (`run_sync`)", "sync", _two(chat)),
    Scenario(
        "agents-stream",
        _AGENTS,
        "agents",
        "streaming (`run_streamed`)",
        "async",
        _two(chat, True),
        quick=("model_1",),
    ),
    Scenario(
        "agents-responses",
        _AGENTS,
        "agents",
        "Responses API",
        "async",
        _two(responses),
    ),
    Scenario(
        "agents-session",
        _AGENTS,
        "agents",
        "sessions (`SQLiteSession`)",
        "async",
        _two(chat),
        boundaries=(*_ALL, "session_write"),
        quick=("model_1", "session_write"),
        expect={"inputs": 1, "items": 4},
    ),
    Scenario(
        "agents-handoff",
        _AGENTS,
        "agents",
        "handoffs",
        "async",
        _handoff,
        quick=("in_tool",),
    ),
    Scenario(
        "agents-structured",
        _AGENTS,
        "agents",
        "structured output (`output_type`)",
        "async",
        _structured_agents,
        quick=(),
    ),
    Scenario(
        "agents-tool-error",
        _AGENTS,
        "agents",
        "tool errors (told to the model)",
        "async",
        _two(chat),
        boundaries=("model_1", "model_2", "before_finish"),
        quick=(),
    ),
    Scenario(
        "pydantic-tools",
        _PYD,
        "pydantic",
        "tool calls, usage",
        "async",
        _two(chat),
        quick=("model_2",),
    ),
    Scenario(
        "pydantic-sync",
        _PYD,
        "pydantic",
        "tool calls (`run_sync`)",
        "sync",
        _two(chat),
    ),
    Scenario(
        "pydantic-stream",
        _PYD,
        "pydantic",
        "streaming (`run_stream`)",
        "async",
        _two(chat, True),
    ),
    Scenario(
        "pydantic-structured",
        _PYD,
        "pydantic",
        "structured output (`output_type`)",
        "async",
        _structured_pydantic,
        quick=(),
    ),
    Scenario(
        "pydantic-retry",
        _PYD,
        "pydantic",
        "retry signals (`ModelRetry`)",
        "async",
        _retry,
        quick=("before_finish",),
    ),
    Scenario(
        "pydantic-anthropic",
        _PYD,
        "pydantic",
        "Anthropic model (streamed)",
        "async",
        _two(anthropic, True),
        quick=(),
    ),
    Scenario("langgraph-tools", _LC, "langchain", "tool calls (`ainvoke`)", "async", _two(chat)),
    Scenario(
        "langgraph-sync",
        _LC,
        "langchain",
        "tool calls (`invoke`)",
        "sync",
        _two(chat),
        quick=("in_tool",),
    ),
    Scenario(
        "langgraph-stream",
        _LC,
        "langchain",
        "streaming (`streaming=True`)",
        "async",
        _two(chat, True),
        quick=(),
    ),
    Scenario(
        "langgraph-interrupt",
        _LC,
        "langchain",
        "interrupts (`interrupt()`, `Command(resume=...)`, `SqliteSaver`)",
        "sync, 2 deliveries",
        _interrupt,
        quick=("in_tool", "model_2"),
    ),
    Scenario(
        "litellm-stream",
        _LITE,
        "litellm",
        "streaming (`acompletion`)",
        "async",
        _two(chat, True),
        quick=("model_1",),
    ),
    Scenario(
        "litellm-sync", _LITE, "litellm", "tool calls (`completion`)", "sync", _two(chat), quick=()
    ),
    Scenario(
        "openai-chat-sync",
        _OAI,
        "openai",
        "Chat Completions",
        "sync",
        _two(chat),
        quick=("in_tool",),
    ),
    Scenario(
        "openai-responses-stream",
        _OAI,
        "openai",
        "Responses API, streamed",
        "async",
        _two(responses, True),
        quick=("model_1",),
    ),
    Scenario("anthropic-sync", _ANT, "anthropic", "Messages", "sync", _two(anthropic), quick=()),
    Scenario(
        "anthropic-stream",
        _ANT,
        "anthropic",
        "Messages, streamed",
        "async",
        _two(anthropic, True),
        quick=("model_2",),
    ),
    Scenario(
        "anthropic-thinking",
        _ANT,
        "anthropic",
        "extended thinking (signed blocks sent back byte for byte)",
        "sync",
        thinking,
        quick=("model_2",),
        expect={"thinking": [THINKING]},
    ),
    Scenario(
        "agents-approval",
        _AGENTS,
        "agents",
        "tool approvals (`needs_approval`, `RunState`, `await_approval`)",
        "async, 2 deliveries",
        _two(chat),
        quick=("in_tool",),
    ),
    Scenario(
        "langgraph-tool-error",
        _LC,
        "langchain",
        "tool errors (`ToolException`, `handle_tool_error=True`)",
        "sync",
        told,
        boundaries=("model_1", "model_2", "before_finish"),
        expect={"told": ["the mailbox is full"]},
    ),
    Scenario(
        "langchain-structured",
        _LC,
        "langchain",
        "structured output (`with_structured_output`)",
        "async",
        structured_lc,
    ),
    Scenario(
        "pydantic-history",
        _PYD,
        "pydantic",
        "`message_history` (a stored conversation continued)",
        "async",
        history,
        expect={"messages": 6},
    ),
    *(
        Scenario(
            name,
            _AGENTS,
            "agents",
            f"tool approvals from a stored `RunState` (`needs_approval`, `{call}(agent, state)`)",
            f"{face}, 2 deliveries",
            _two(chat, stream),
            boundaries=("model_1", "approved", "in_tool", "model_2", "before_finish"),
            quick=quick,
        )
        for name, call, face, stream, quick in (
            ("agents-approval-state", "Runner.run", "async", False, ("approved", "in_tool")),
            ("agents-approval-state-sync", "Runner.run_sync", "sync", False, ("model_2",)),
            ("agents-approval-state-stream", "Runner.run_streamed", "async", True, ("model_1",)),
        )
    ),
    Scenario(
        "langgraph-interrupt-async",
        _LC,
        "langchain",
        "interrupts (`interrupt()`, `Command(resume=...)`, `AsyncSqliteSaver`, `ainvoke`)",
        "async, 2 deliveries",
        _interrupt,
        quick=("in_tool",),
    ),
    *(
        Scenario(
            f"{name}-transient",
            framework,
            family,
            "transient provider errors (503, 429)",
            face,
            script,
            boundaries=("error_1", "error_2"),
            quick=quick,
        )
        for name, framework, family, face, script, quick in (
            ("agents", _AGENTS, "agents", "async", _two(chat), ()),
            ("pydantic", _PYD, "pydantic", "async", _two(chat), ("error_2",)),
            ("langgraph", _LC, "langchain", "sync", _two(chat), ()),
            ("litellm", _LITE, "litellm", "async", _two(chat, True), ()),
            ("openai", _OAI, "openai", "sync", _two(chat), ()),
            ("anthropic", _ANT, "anthropic", "async", _two(anthropic, True), ()),
        )
    ),
]


def cells(full: bool) -> list[tuple[Scenario, str]]:
    """The (scenario, boundary) cells to run: the quick ones, or every one when ``full``."""
    return [
        (scenario, boundary)
        for scenario in SCENARIOS
        for boundary in scenario.boundaries
        if full or boundary in scenario.quick
    ]


def render() -> str:
    """The conformance table in Markdown (docs/conformance.md)."""
    lines = [
        "# Conformance matrix",
        "",
        "<!-- generated by `python -m tests.integrations.matrix_cells > docs/conformance.md`;"
        " tests/integrations/test_conformance_matrix.py checks it -->",
        "",
        "Each cell: a real child process runs the feature through the real framework against a",
        "scripted model server, is SIGKILLed at the boundary, and is run again with the same",
        "run id; the side effects are counted in a log outside the process and the model calls",
        "at the server. A cell's verdict is what that resume did. The default CI run covers the",
        "cells marked **CI**; `REDRIVE_MATRIX=full` runs every cell.",
        "",
        "Boundaries:",
        "",
        *(f"- `{name}`: {text}." for name, text in BOUNDARIES.items()),
        "",
        "| framework | feature | face | boundary | verdict |",
        "| --- | --- | --- | --- | --- |",
    ]
    for scenario in SCENARIOS:
        face = scenario.face
        for boundary in scenario.boundaries:
            mark = " **CI**" if boundary in scenario.quick else ""
            verdict = scenario.open.get(boundary, VERDICTS[boundary])
            lines.append(
                f"| {scenario.framework} | {scenario.feature} | {face} | "
                f"`{boundary}`{mark} | {verdict} |"
            )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(render(), end="")
