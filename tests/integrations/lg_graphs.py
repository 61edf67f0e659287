"""LangGraph graphs the interrupt tests share: a recorded ``ChatOpenAI`` and the ToolNode pattern.

The ToolNode pattern (LangGraph's human-in-the-loop examples): a ``model``
node, then a ``ToolNode`` running the model's calls of ``send_email`` (a
``restart_safe=False`` redrive tool: the charge) and ``ask_human`` (which
calls ``interrupt()``), then the model again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def recorded_llm(base: str, tools: list[Any], clients: list[Any]) -> Any:
    """A ``ChatOpenAI`` on redrive's recording httpx clients (appended to ``clients`` to close)."""
    from langchain_openai import ChatOpenAI

    from redrive.integrations.langchain import openai_http_clients

    sync_http, async_http = openai_http_clients(base)
    clients.extend((sync_http, async_http))
    llm = ChatOpenAI(
        model="gpt-4o",
        base_url=base,
        api_key="sk-test",  # type: ignore[arg-type]
        max_retries=0,
        http_client=sync_http,
        http_async_client=async_http,
    )
    return llm.bind_tools(tools) if tools else llm


def tool_node_graph(
    base: str,
    charge_body: Callable[[], Any],
    checkpointer: Any,
    clients: list[Any],
    ask_first: Callable[[], None] | None = None,
    charge_first: Callable[[], None] | None = None,
) -> Any:
    """The ToolNode pattern; ``send_email`` returns ``charge_body()``, ``ask_human`` interrupts.

    Args:
        base: the scripted server's base URL.
        charge_body: the charge's side effect (its return value is the tool's result).
        checkpointer: the graph's checkpointer.
        clients: httpx clients made are appended here (the caller closes them).
        ask_first: called by ``ask_human`` before it interrupts (to force an ordering).
        charge_first: called before the charge's tool step begins (the ``ToolNode`` then
            runs a plain ``send_email`` that calls it, then the redrive tool).
    """
    from langchain_core.tools import tool as plain_tool
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition
    from langgraph.types import interrupt

    from redrive.integrations.langchain import tool

    @tool(name="send_email", restart_safe=False)
    def charge(to: str, body: str) -> str:
        """Charge the card (the scripted model calls it send_email)."""
        return str(charge_body())

    @plain_tool
    def ask_human(question: str) -> str:
        """Ask the person in charge."""
        if ask_first is not None:
            ask_first()
        return str(interrupt(question))

    sender: Any = charge
    if charge_first is not None:
        first = charge_first

        @plain_tool("send_email")
        def sender(to: str, body: str) -> str:
            """Charge the card (the scripted model calls it send_email)."""
            first()
            return str(charge.invoke({"to": to, "body": body}))

    llm = recorded_llm(base, [sender, ask_human], clients)

    def call_model(state: Any) -> dict[str, Any]:
        return {"messages": [llm.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("model", call_model)
    builder.add_node("tools", ToolNode([sender, ask_human]))
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", tools_condition)
    builder.add_edge("tools", "model")
    return builder.compile(checkpointer=checkpointer)


def parallel_tools_graph(
    base: str,
    names: list[str],
    charge_body: Callable[[int], str],
    checkpointer: Any,
    clients: list[Any],
    before: Callable[[str], None],
) -> Any:
    """The ToolNode pattern with any number of parallel calls (langgraph#6533's shape).

    Args:
        base: the scripted server's base URL.
        names: the tools, ``charge_N`` (a ``restart_safe=False`` redrive tool whose body
            is ``charge_body(N)``) or ``ask_N`` (calls ``interrupt(name)``).
        charge_body: the side effect of ``charge_N``; its result is the tool's result.
        checkpointer: the graph's checkpointer.
        clients: httpx clients made are appended here (the caller closes them).
        before: called with the tool's name in its call, before its redrive step
            or its ``interrupt()`` (to force an order of the parallel calls).
    """
    from langchain_core.tools import BaseTool
    from langchain_core.tools import tool as plain_tool
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition
    from langgraph.types import interrupt

    from redrive.integrations.langchain import tool

    def charging(name: str) -> BaseTool:
        number = int(name.rsplit("_", 1)[1])

        @tool(name=name, restart_safe=False)
        def charge(amount: int) -> str:
            """Charge the card."""
            return charge_body(number)

        @plain_tool(name)
        def call(amount: int) -> str:
            """Charge the card."""
            before(name)
            return str(charge.invoke({"amount": amount}))

        return call

    def asking(name: str) -> BaseTool:
        @plain_tool(name)
        def ask(question: str) -> str:
            """Ask the person in charge."""
            before(name)
            return str(interrupt(question))

        return ask

    tools = [charging(name) if name.startswith("charge") else asking(name) for name in names]
    llm = recorded_llm(base, tools, clients)

    def call_model(state: Any) -> dict[str, Any]:
        return {"messages": [llm.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("model", call_model)
    builder.add_node("tools", ToolNode(tools))
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", tools_condition)
    builder.add_edge("tools", "model")
    return builder.compile(checkpointer=checkpointer)


def approval_graph(
    base: str,
    names: list[str],
    draw_body: Callable[[int], str],
    checkpointer: Any,
    clients: list[Any],
    recover: Callable[[dict[str, Any], str], Any] | None = None,
    per_call: bool = False,
    before: Callable[[str], None] = lambda _: None,
) -> Any:
    """The ToolNode pattern, approve then act: ``ask_N`` calls ``interrupt()``, then draws ``N``.

    With ``per_call`` each call is a task of its own (a ``Send`` per call, as
    ``create_react_agent(version="v2")`` does): parallel ``interrupt()`` calls
    are pending together and one ``Command(resume={id: answer, ...})`` answers
    them all. Without it one ``ToolNode`` task runs every call: the first
    interrupt gets out, one at a time.

    Args:
        base: the scripted server's base URL.
        names: the model's parallel calls: ``ask_N`` (asks a person, then draws ``N``
            with the answer) or ``charge_N`` (draws ``N`` at once).
        draw_body: the side effect of drawing ``N``; its result is the draw's result.
        checkpointer: the graph's checkpointer.
        clients: httpx clients made are appended here (the caller closes them).
        recover: the draw's ``recover(args, key)`` (None: a draw in flight blocks).
        per_call: one task per call (see above).
        before: called with the call's name as it begins (before its ``interrupt()``)
            and with ``draw_N`` before the draw's step (to force an order of the calls).
    """
    from langchain_core.messages import AIMessage
    from langchain_core.tools import BaseTool
    from langchain_core.tools import tool as plain_tool
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition
    from langgraph.types import Send, interrupt

    from redrive.integrations.langchain import tool

    @tool(name="draw", restart_safe=False, recover=recover)
    def draw(number: int) -> str:
        """Draw (the side effect, counted outside the process)."""
        return draw_body(number)

    def calling(name: str) -> BaseTool:
        number = int(name.rsplit("_", 1)[1])
        asks = name.startswith("ask")

        @plain_tool(name)
        def call(question: str) -> str:
            """Ask the person in charge, then draw (``ask_N``), or draw at once."""
            before(name)
            answer = str(interrupt(question)) if asks else "no question"
            before(f"draw_{number}")
            return f"{draw.invoke({'number': number})}: {answer}"

        return call

    tools = [calling(name) for name in names]
    llm = recorded_llm(base, tools, clients)

    def call_model(state: Any) -> dict[str, Any]:
        return {"messages": [llm.invoke(state["messages"])]}

    def each_call(state: Any) -> Any:
        last = state["messages"][-1]
        if not (isinstance(last, AIMessage) and last.tool_calls):
            return "__end__"
        return [
            Send(
                "tools",
                {"__type": "tool_call_with_context", "tool_call": call, "state": state},
            )
            for call in last.tool_calls
        ]

    builder = StateGraph(MessagesState)
    builder.add_node("model", call_model)
    builder.add_node("tools", ToolNode(tools))
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", each_call if per_call else tools_condition)
    builder.add_edge("tools", "model")
    return builder.compile(checkpointer=checkpointer)
