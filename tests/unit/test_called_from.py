"""The ``called from:`` line of a divergence names the agent's own code (issue 25, failure 7).

A framework (pydantic-ai, anyio) runs a tool call or a model request in an
asyncio task of its own: that task's stack holds no user frame below the event
loop, and the line used to name the outer ``asyncio.run(...)`` line (or
``.../bin/redrive:8 in <module>``). The framework here is a module placed
where installed packages live, as pydantic-ai is.
"""

from __future__ import annotations

import asyncio
import os
import sys
import sysconfig
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import redrive
from redrive.replay import _caller, is_user_file

FRAMEWORK = '''
import asyncio

async def in_task(fn, *args):
    """Run fn in a task of its own, as pydantic-ai runs a tool call."""
    return await asyncio.create_task(fn(*args))

async def in_gather(fn, *args):
    """Run fn in a gather, as a framework runs parallel tool calls."""
    return (await asyncio.gather(fn(*args)))[0]

async def in_wait_for(fn, *args):
    """A task awaited with a timeout (wait_for waits on a future of its own)."""
    return await asyncio.wait_for(asyncio.create_task(fn(*args)), 10)

async def in_wait(fn, *args):
    """Tasks awaited with asyncio.wait (a closure over its waiter)."""
    done, _ = await asyncio.wait([asyncio.create_task(fn(*args))])
    return done.pop().result()

async def in_nested_tasks(fn, *args):
    """A task that awaits another task (an agent graph's node running a tool)."""
    return await asyncio.create_task(in_task(fn, *args))

async def in_tracked_task(fn, *args):
    """A task whose result reaches the caller through a plain future the framework sets
    itself, as pydantic_graph's _run_tracked_task does: nothing links the two."""
    loop = asyncio.get_running_loop()
    result = loop.create_future()

    async def tracked():
        try:
            result.set_result(await fn(*args))
        except BaseException as exc:
            result.set_exception(exc)

    keep = asyncio.create_task(tracked())
    try:
        return await result
    finally:
        await keep
'''


@pytest.fixture
def framework(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """An installed-package module ``fakeframework`` (its folder counts as site-packages)."""
    folder = tmp_path / "site"
    folder.mkdir()
    (folder / "fakeframework.py").write_text(textwrap.dedent(FRAMEWORK))
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setattr(_caller, "_LIBRARY", (*_caller._LIBRARY, str(folder) + os.sep))
    monkeypatch.delitem(sys.modules, "fakeframework", raising=False)  # this test's copy
    import fakeframework

    yield fakeframework


@redrive.tool(read_only=True)
async def lookup(order: str) -> str:
    """A tool the framework calls in a task."""
    return order


async def agent(order: str, how: Callable[..., Any]) -> str:
    """The agent's code: the line that asks for the tool is the one to name."""
    return str(await how(lookup, order))  # <- called from


AGENT_LINE = f"test_called_from.py:{agent.__code__.co_firstlineno + 2} in agent"


@pytest.mark.parametrize(
    "how",
    ["in_task", "in_gather", "in_wait_for", "in_wait", "in_nested_tasks", "in_tracked_task"],
)
def test_a_divergence_in_a_framework_task_names_the_agents_line(framework: Any, how: str) -> None:
    """The line names the agent's frame that awaits the framework, not ``asyncio.run``."""
    journal = redrive.open_journal(":memory:")
    call = getattr(framework, how)

    async def main(order: str) -> None:
        async with redrive.run(journal, "r"):
            await agent(order, call)

    asyncio.run(main("A-1"))
    with pytest.raises(redrive.DivergenceError) as caught:
        asyncio.run(main("B-2"))
    assert caught.value.caller is not None and caught.value.caller.endswith(AGENT_LINE)
    assert f"called from: {caught.value.caller}" in str(caught.value)


def test_console_scripts_and_packages_are_not_user_code() -> None:
    """``.../bin/redrive`` (a console script) is never named as the user's code."""
    scripts = sysconfig.get_paths()["scripts"]
    assert not is_user_file(os.path.join(scripts, "redrive"))
    assert not is_user_file(asyncio.__file__)
    assert is_user_file(__file__)


def test_two_tasks_waiting_in_a_framework_name_no_guess(framework: Any) -> None:
    """When the task that asked cannot be linked to the step's task and two tasks of user
    code wait inside the framework, neither is named: the outer frame is, never a guess."""
    journal = redrive.open_journal(":memory:")

    async def other() -> None:
        await framework.in_task(asyncio.sleep, 0.5)  # <- another task waiting in the framework

    async def main(order: str) -> None:
        bystander = asyncio.create_task(other())
        await asyncio.sleep(0)
        try:
            async with redrive.run(journal, "r"):
                await agent(order, framework.in_tracked_task)
        finally:
            await bystander

    asyncio.run(main("A-1"))
    with pytest.raises(redrive.DivergenceError) as caught:
        asyncio.run(main("B-2"))
    assert caught.value.caller is not None and not caught.value.caller.endswith(AGENT_LINE)
    assert " in other" not in caught.value.caller
