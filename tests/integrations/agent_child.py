"""One agent run through a framework, in its own process, for the crash tests.

Usage: ``python -m tests.integrations.agent_child SCENARIO JOURNAL EFFECTS BASE_URL MODE``.
The agent is asked to apologise to a customer; the model (the scripted server
at BASE_URL) calls the tool ``send_email`` once, then answers. The tool's
side effect is a line appended and fsynced to EFFECTS, outside the process.
MODE is ``live`` (record or resume), ``offline`` (``live=False``: replay only), or
``live,offline``: the two in turn in this one fresh process, each with the journal
opened afresh, the offline phase starting only once a line arrives on stdin (so
the parent can check the server and the side-effect log between them).
With ``KILL_IN_TOOL=1`` the process SIGKILLs itself inside the tool body,
after the side effect and before its result is journaled.
Each phase's last line printed is ``{"output": ...}``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from typing import Any

import redrive

PROMPT = "Ada's order arrived damaged; email her an apology."
RUN_ID = "agent:1"


def _effect(path: str, to: str) -> str:
    with open(path, "a") as log:
        log.write(f"email to {to}\n")
        log.flush()
        os.fsync(log.fileno())
    if os.environ.get("KILL_IN_TOOL") == "1":  # die with the email sent, its result unrecorded
        os.kill(os.getpid(), signal.SIGKILL)
    return f"sent to {to}"


async def _agents(scenario: str, effects: str, base_url: str) -> Any:
    import agents
    from openai import AsyncOpenAI

    from redrive.integrations.openai_agents import function_tool

    agents.set_tracing_disabled(True)

    @function_tool(restart_safe=False)
    def send_email(to: str, body: str) -> str:
        """Send an email to a customer.

        Args:
            to: the address.
            body: the text.
        """
        return _effect(effects, to)

    client = redrive.wrap(AsyncOpenAI(base_url=base_url, api_key="sk-test", max_retries=0))
    model: Any
    if "default" in scenario:  # the model named by string, on the SDK's default client
        agents.set_default_openai_client(client, use_for_tracing=False)
        model = "gpt-4o"
    elif "responses" in scenario:
        model = agents.OpenAIResponsesModel(model="gpt-4o", openai_client=client)
    else:
        model = agents.OpenAIChatCompletionsModel(model="gpt-4o", openai_client=client)
    agent = agents.Agent(name="support", instructions="Help.", model=model, tools=[send_email])
    if scenario.endswith("-stream"):
        streamed = agents.Runner.run_streamed(agent, PROMPT)
        async for _ in streamed.stream_events():
            pass
        return streamed.final_output
    result = await agents.Runner.run(agent, PROMPT)
    return result.final_output


async def _pydantic(scenario: str, effects: str, base_url: str) -> Any:
    import pydantic_ai

    from redrive.integrations.pydantic_ai import tool

    @tool(restart_safe=False)
    def send_email(to: str, body: str) -> str:
        """Send an email to a customer."""
        return _effect(effects, to)

    model: Any
    if "anthropic" in scenario:
        from anthropic import AsyncAnthropic
        from pydantic_ai.models.anthropic import AnthropicModel
        from pydantic_ai.providers.anthropic import AnthropicProvider

        root = base_url.removesuffix("/v1")  # the Anthropic SDK adds /v1 itself
        client = redrive.wrap(AsyncAnthropic(base_url=root, api_key="sk-ant-t", max_retries=0))
        model = AnthropicModel(
            "claude-sonnet-4-5", provider=AnthropicProvider(anthropic_client=client)
        )
    else:
        from openai import AsyncOpenAI
        from pydantic_ai.models.openai import OpenAIChatModel
        from pydantic_ai.providers.openai import OpenAIProvider

        oclient = redrive.wrap(AsyncOpenAI(base_url=base_url, api_key="sk-test", max_retries=0))
        provider = OpenAIProvider(openai_client=oclient)
        if "responses" in scenario:
            from pydantic_ai.models.openai import OpenAIResponsesModel

            model = OpenAIResponsesModel("gpt-4o", provider=provider)
        else:
            model = OpenAIChatModel("gpt-4o", provider=provider)
    agent = pydantic_ai.Agent(model, instructions="Help.", tools=[send_email])
    if scenario.endswith("-stream"):
        async with agent.run_stream(PROMPT) as streamed:
            return await streamed.get_output()
    return (await agent.run(PROMPT)).output


async def _langchain(scenario: str, effects: str, base_url: str) -> Any:
    from langchain_openai import ChatOpenAI
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    from redrive.integrations.langchain import openai_http_clients, tool

    @tool(restart_safe=False)
    def send_email(to: str, body: str) -> str:
        """Send an email to a customer."""
        return _effect(effects, to)

    sync_http, async_http = openai_http_clients(base_url)
    llm = ChatOpenAI(
        model="gpt-4o",
        base_url=base_url,
        api_key="sk-test",  # type: ignore[arg-type]
        max_retries=0,
        streaming=scenario.endswith("-stream"),
        http_client=sync_http,
        http_async_client=async_http,
    )
    model = llm.bind_tools([send_email])

    async def call_model(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("model", call_model)
    builder.add_node("tools", ToolNode([send_email]))
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", tools_condition)
    builder.add_edge("tools", "model")
    graph = builder.compile()
    state = await graph.ainvoke({"messages": [("user", PROMPT)]})
    return state["messages"][-1].content


async def _litellm(scenario: str, effects: str, base_url: str) -> Any:
    import litellm
    from openai import AsyncOpenAI

    @redrive.tool(restart_safe=False)
    def send_email(to: str, body: str) -> str:
        return _effect(effects, to)

    client = redrive.wrap(AsyncOpenAI(base_url=base_url, api_key="sk-test", max_retries=0))
    schema = {
        "type": "function",
        "function": {
            "name": "send_email",
            "parameters": {
                "type": "object",
                "properties": {"to": {"type": "string"}, "body": {"type": "string"}},
                "required": ["to", "body"],
            },
        },
    }
    messages: list[dict[str, Any]] = [{"role": "user", "content": PROMPT}]
    while True:
        stream = await litellm.acompletion(
            model="openai/gpt-4o",
            messages=messages,
            tools=[schema],
            stream=True,
            client=client,
            api_base=base_url,
            api_key="sk-test",
        )
        chunks = [chunk async for chunk in stream]
        message = litellm.stream_chunk_builder(chunks, messages=messages).choices[0].message
        if not message.tool_calls:
            return message.content
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls:
            result = send_email(**json.loads(call.function.arguments))
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})


async def main(scenario: str, journal_path: str, effects: str, base_url: str, mode: str) -> None:
    """Run the scenario's agent inside ``redrive.run`` once per phase of ``mode``.

    ``mode`` is ``live``, ``offline`` or ``live,offline``; each phase prints its
    output as ``{"output": ...}``, and a later phase waits for a line on stdin.
    """
    family = scenario.split("-")[0]
    drive = {
        "agents": _agents,
        "pydantic": _pydantic,
        "langchain": _langchain,
        "litellm": _litellm,
    }[family]
    for index, phase in enumerate(mode.split(",")):
        if index:
            sys.stdin.readline()  # the parent's go-ahead
        journal = redrive.open_journal(journal_path)
        try:
            async with redrive.run(
                journal, RUN_ID, input={"prompt": PROMPT}, live=phase == "live"
            ) as run:
                output = run.finish(await drive(scenario, effects, base_url))
        finally:
            journal.close()
        print(json.dumps({"output": output}), flush=True)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:6]))
