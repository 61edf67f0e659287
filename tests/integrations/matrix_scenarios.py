"""The conformance matrix's scenarios: which framework feature each row drives, and how.

:data:`SCENARIOS` lists, per framework, the state features it documents that
the matrix drives (one scenario each; the drivers are in
tests/integrations/matrix_drivers.py, matrix_bare.py, matrix_more.py,
matrix_state.py and matrix_signed.py, their model turns in matrix_scripts.py).
Another file may append scenarios (e.g. a transient-error column) before the
tests collect. The boundaries, verdicts and the table are in matrix_cells.py.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from tests.integrations.fakeapi import anthropic, chat, responses
from tests.integrations.matrix_scripts import (
    REASONING,
    THINKING,
    handoff,
    history,
    interrupt,
    reasoning,
    retry,
    streamed_thinking,
    structured_agents,
    structured_lc,
    structured_pydantic,
    thinking,
    told,
    two,
)
from tests.sdkserver import Reply


@attrs.frozen
class Scenario:
    """One framework feature driven through a crash and a resume.

    Attributes:
        name: the scenario's name in a driver table (matrix_child.py merges them).
        framework: the framework's name as the table shows it.
        family: the import family (tests/integrations/conftest.py ``need``).
        feature: the documented state feature the scenario exercises.
        face: ``"sync"`` or ``"async"``; a scenario that opens its runs itself (several
            deliveries of one run id) says so: ``"async, 2 deliveries"``.
        script: the model turns the scripted server answers, in order.
        boundaries: the boundaries that apply to this scenario.
        quick: the boundaries of the smaller local run (``REDRIVE_MATRIX=quick``), chosen so
            that the quick cells cover every row and each framework's every boundary
            (matrix_cells.py ``uncovered``); CI runs every boundary.
        effects: side effects a finished run has made (each exactly once).
        expect: entries the scenario's answer must have (e.g. one stored input).
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


_AGENTS, _PYD, _LC, _LITE = "OpenAI Agents SDK", "pydantic-ai", "LangChain / LangGraph", "litellm"
_OAI, _ANT = "OpenAI SDK", "Anthropic SDK"
_ALL = ("model_1", "in_tool", "model_2", "before_finish")

#: every scenario of the matrix; extend it (append) to add a column of features
SCENARIOS: list[Scenario] = [
    Scenario(
        "agents-tools",
        _AGENTS,
        "agents",
        "tool calls, usage",
        "async",
        two(chat),
        quick=("before_finish",),
    ),
    Scenario(
        "agents-sync",
        _AGENTS,
        "agents",
        "tool calls (`run_sync`)",
        "sync",
        two(chat),
        quick=("in_tool",),
    ),
    Scenario(
        "agents-stream",
        _AGENTS,
        "agents",
        "streaming (`run_streamed`)",
        "async",
        two(chat, True),
        quick=("model_1",),
    ),
    Scenario(
        "agents-responses",
        _AGENTS,
        "agents",
        "Responses API",
        "async",
        two(responses),
        quick=("model_2",),
    ),
    Scenario(
        "agents-session",
        _AGENTS,
        "agents",
        "sessions (`SQLiteSession`)",
        "async",
        two(chat),
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
        handoff,
        quick=("in_tool",),
    ),
    Scenario(
        "agents-structured",
        _AGENTS,
        "agents",
        "structured output (`output_type`)",
        "async",
        structured_agents,
        quick=("model_2",),
    ),
    Scenario(
        "agents-tool-error",
        _AGENTS,
        "agents",
        "tool errors (told to the model)",
        "async",
        two(chat),
        boundaries=("model_1", "model_2", "before_finish"),
        quick=("before_finish",),
    ),
    Scenario(
        "pydantic-tools",
        _PYD,
        "pydantic",
        "tool calls, usage",
        "async",
        two(chat),
        quick=("model_2",),
    ),
    Scenario(
        "pydantic-sync",
        _PYD,
        "pydantic",
        "tool calls (`run_sync`)",
        "sync",
        two(chat),
        quick=("in_tool",),
    ),
    Scenario(
        "pydantic-stream",
        _PYD,
        "pydantic",
        "streaming (`run_stream`)",
        "async",
        two(chat, True),
        quick=("model_1",),
    ),
    Scenario(
        "pydantic-structured",
        _PYD,
        "pydantic",
        "structured output (`output_type`)",
        "async",
        structured_pydantic,
        quick=("before_finish",),
    ),
    Scenario(
        "pydantic-retry",
        _PYD,
        "pydantic",
        "retry signals (`ModelRetry`)",
        "async",
        retry,
        quick=("before_finish",),
    ),
    Scenario(
        "pydantic-anthropic",
        _PYD,
        "pydantic",
        "Anthropic model (streamed)",
        "async",
        two(anthropic, True),
        quick=("model_2",),
    ),
    Scenario(
        "langgraph-tools",
        _LC,
        "langchain",
        "tool calls (`ainvoke`)",
        "async",
        two(chat),
        quick=("model_1",),
    ),
    Scenario(
        "langgraph-sync",
        _LC,
        "langchain",
        "tool calls (`invoke`)",
        "sync",
        two(chat),
        quick=("in_tool",),
    ),
    Scenario(
        "langgraph-stream",
        _LC,
        "langchain",
        "streaming (`streaming=True`)",
        "async",
        two(chat, True),
        quick=("model_2",),
    ),
    Scenario(
        "langgraph-interrupt",
        _LC,
        "langchain",
        "interrupts (`interrupt()`, `Command(resume=...)`, `SqliteSaver`)",
        "sync, 2 deliveries",
        interrupt,
        quick=("in_tool", "model_2"),
    ),
    Scenario(
        "litellm-stream",
        _LITE,
        "litellm",
        "streaming (`acompletion`)",
        "async",
        two(chat, True),
        quick=("model_1", "before_finish"),
    ),
    Scenario(
        "litellm-sync",
        _LITE,
        "litellm",
        "tool calls (`completion`)",
        "sync",
        two(chat),
        quick=("in_tool", "model_2"),
    ),
    Scenario(
        "openai-chat-sync",
        _OAI,
        "openai",
        "Chat Completions",
        "sync",
        two(chat),
        quick=("in_tool", "before_finish"),
    ),
    Scenario(
        "openai-responses-stream",
        _OAI,
        "openai",
        "Responses API, streamed",
        "async",
        two(responses, True),
        quick=("model_1", "model_2"),
    ),
    Scenario(
        "anthropic-sync",
        _ANT,
        "anthropic",
        "Messages",
        "sync",
        two(anthropic),
        quick=("model_1", "in_tool"),
    ),
    Scenario(
        "anthropic-stream",
        _ANT,
        "anthropic",
        "Messages, streamed",
        "async",
        two(anthropic, True),
        quick=("model_2", "before_finish"),
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
        two(chat),
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
        quick=("before_finish",),
        expect={"told": ["the mailbox is full"]},
    ),
    Scenario(
        "langchain-structured",
        _LC,
        "langchain",
        "structured output (`with_structured_output`)",
        "async",
        structured_lc,
        quick=("model_1",),
    ),
    Scenario(
        "pydantic-history",
        _PYD,
        "pydantic",
        "`message_history` (a stored conversation continued)",
        "async",
        history,
        quick=("in_tool",),
        expect={"messages": 6},
    ),
    *(
        Scenario(
            name,
            _AGENTS,
            "agents",
            f"tool approvals from a stored `RunState` (`needs_approval`, `{call}(agent, state)`)",
            f"{face}, 2 deliveries",
            two(chat, stream),
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
        interrupt,
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
            quick=("error_1", "error_2"),  # the only row of its framework with these
        )
        for name, framework, family, face, script in (
            ("agents", _AGENTS, "agents", "async", two(chat)),
            ("pydantic", _PYD, "pydantic", "async", two(chat)),
            ("langgraph", _LC, "langchain", "sync", two(chat)),
            ("litellm", _LITE, "litellm", "async", two(chat, True)),
            ("openai", _OAI, "openai", "sync", two(chat)),
            ("anthropic", _ANT, "anthropic", "async", two(anthropic, True)),
        )
    ),
    # issue 27, fidelity: signed or encrypted content sent back byte for byte (matrix_signed.py)
    Scenario(
        "openai-reasoning",
        _OAI,
        "openai",
        "Responses API, encrypted reasoning (`store=False`, sent back byte for byte)",
        "sync",
        reasoning,
        quick=("model_2",),
        expect={"reasoning": [REASONING]},
    ),
    Scenario(
        "agents-reasoning",
        _AGENTS,
        "agents",
        "encrypted reasoning (`OpenAIResponsesModel`, sent back byte for byte)",
        "async",
        reasoning,
        quick=("in_tool",),
        expect={"reasoning": [REASONING]},
    ),
    Scenario(
        "pydantic-thinking",
        _PYD,
        "pydantic",
        "Anthropic extended thinking (signed `ThinkingPart` sent back byte for byte)",
        "async",
        streamed_thinking,
        quick=("model_2",),
        expect={"thinking": [THINKING]},
    ),
]
