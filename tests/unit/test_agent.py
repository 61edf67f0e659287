"""redrive.agent: the tool-calling loop, its schemas, and parallel tool calls inside a run."""

from __future__ import annotations

import json
import threading
from types import SimpleNamespace
from typing import Any, Literal

import pytest

import redrive
from redrive.agent import AgentTurnLimitError, run_agent, tool_schema
from redrive.storage import MemoryJournal


def _response(content: str | None, calls: list[tuple[str, str, dict[str, Any]]]) -> Any:
    tool_calls = [
        SimpleNamespace(id=cid, function=SimpleNamespace(name=name, arguments=json.dumps(args)))
        for cid, name, args in calls
    ]
    message = SimpleNamespace(content=content, tool_calls=tool_calls or None)
    return SimpleNamespace(choices=[SimpleNamespace(message=message)])


class ScriptClient:
    """A duck-typed client answering from a list of responses; records each request."""

    def __init__(self, responses: list[Any]) -> None:
        self.responses = list(responses)
        self.requests: list[dict[str, Any]] = []
        self.chat = SimpleNamespace(completions=SimpleNamespace(create=self.create))

    def create(self, **request: Any) -> Any:
        self.requests.append(json.loads(json.dumps(request)))
        return self.responses.pop(0)


executed: list[str] = []
seen_runs: list[str | None] = []
lock = threading.Lock()


@redrive.tool(name="get_weather", read_only=True)
def get_weather(city: str, unit: Literal["c", "f"] = "c") -> dict[str, Any]:
    """Get the current weather.

    Args:
        city: the city's name.
        unit: degrees Celsius or Fahrenheit.
    """
    with lock:
        executed.append(city)
        # inside a body the run is not "current" (calls there belong to the tool), but
        # its idempotency key names the run: the thread carried the run's context
        key = redrive.idempotency_key()
        seen_runs.append(key.rsplit(":", 2)[0] if key is not None else None)
    return {"city": city, "temp": len(city)}


def test_tool_schema_from_signature_and_docstring() -> None:
    """The schema takes its name, description, types, enum and required list from the function."""
    schema = tool_schema(get_weather)
    assert schema == {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the current weather.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "the city's name."},
                    "unit": {
                        "type": "string",
                        "enum": ["c", "f"],
                        "description": "degrees Celsius or Fahrenheit.",
                    },
                },
                "required": ["city"],
                "additionalProperties": False,
            },
        },
    }


def test_parallel_calls_see_the_run_and_replay_without_executing() -> None:
    """Parallel tool calls run in the active run's context, and a finished run replays them."""
    executed.clear()
    seen_runs.clear()
    journal = MemoryJournal()

    def script() -> list[Any]:
        return [
            _response(
                None,
                [
                    ("call_a", "get_weather", {"city": "Oslo"}),
                    ("call_b", "get_weather", {"city": "Lima"}),
                ],
            ),
            _response("Oslo 4, Lima 4", []),
        ]

    client = ScriptClient(script())
    with redrive.run(journal, "agent:1") as run:
        result = run_agent(client, "m", [{"role": "user", "content": "weather?"}], [get_weather])
        run.finish(result.final)
    assert sorted(executed) == ["Lima", "Oslo"]
    assert seen_runs == ["agent:1", "agent:1"]
    roles = [m["role"] for m in result.messages]
    assert roles == ["user", "assistant", "tool", "tool", "assistant"]
    assert [m.get("tool_call_id") for m in result.messages[2:4]] == ["call_a", "call_b"]
    assert client.requests[1]["messages"][2]["content"] == '{"city": "Oslo", "temp": 4}'

    with redrive.run(journal, "agent:1") as again:
        replayed = run_agent(
            ScriptClient(script()), "m", [{"role": "user", "content": "weather?"}], [get_weather]
        )
    assert sorted(executed) == ["Lima", "Oslo"]
    assert again.live_steps == 0
    assert replayed.final == "Oslo 4, Lima 4"


def test_unknown_tool_and_bad_arguments_are_told_to_the_model() -> None:
    """A call to a missing tool, or with non-JSON arguments, gets an error result, not a crash."""
    bad = _response(None, [("call_x", "nope", {})])
    bad.choices[0].message.tool_calls.append(
        SimpleNamespace(id="call_y", function=SimpleNamespace(name="get_weather", arguments="{"))
    )
    client = ScriptClient([bad, _response("sorry", [])])
    result = run_agent(client, "m", [{"role": "user", "content": "hi"}], [get_weather])
    errors = [json.loads(m["content"])["error"] for m in result.messages if m["role"] == "tool"]
    assert "unknown tool 'nope'" in errors[0]
    assert "not valid JSON" in errors[1]
    assert result.final == "sorry"


def test_turn_limit() -> None:
    """A model that never stops asking for tools ends the loop with AgentTurnLimitError."""
    calls = [("call_1", "get_weather", {"city": "Rome"})]
    client = ScriptClient([_response(None, calls), _response(None, calls)])
    with pytest.raises(AgentTurnLimitError, match="after 2 model calls") as info:
        run_agent(client, "m", [{"role": "user", "content": "loop"}], [get_weather], max_turns=2)
    assert info.value.max_turns == 2
    assert len(info.value.messages) == 5
