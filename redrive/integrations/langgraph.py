"""LangGraph invocations inside a redrive run: the checkpointer and the journal, each its part.

Who owns what:

* the **checkpointer** owns the graph's state between invocations: the
  thread's messages, where an ``interrupt()`` paused it, what a
  ``Command(resume=...)`` continues from;
* **redrive** owns the steps inside one execution: each model call and each
  tool call (:func:`redrive.integrations.langchain.tool`) is journaled, so a
  node that runs again (after a crash, or because LangGraph re-executes an
  interrupted node from its start on resume) replays its finished steps
  instead of running them twice.

:func:`invoke` / :func:`ainvoke` call ``graph.invoke`` / ``graph.ainvoke``
(https://langchain-ai.github.io/langgraph/concepts/human_in_the_loop/) and
make the two agree:

1. The checkpoint the invocation starts from is journaled (a value step
   ``langgraph_start`` labelled with the thread id). When a crashed attempt
   left checkpoints of its own behind, the re-driven invocation starts again
   from the journaled one (``checkpoint_id`` in the config), so the graph
   asks the steps the journal holds in their order; a thread the run created
   is deleted from the checkpointer and started afresh.
2. An invocation that ends at an ``interrupt()`` journals a
   ``langgraph_interrupt`` note and suspends the run (status ``suspended``;
   the ``with redrive.run(...)`` block ends). Read the question from
   ``graph.get_state(config).interrupts``.
3. An invocation with ``Command(resume=...)`` under the same run id resumes
   the run: the steps recorded before the interrupt are answered by the
   checkpointer's state, except the steps of the graph tasks LangGraph runs
   again from the checkpoint the resume starts from (model or tool: a card
   charged, a model paid before the interrupt is not paid again), but for
   a ``@task`` whose saved result LangGraph hands back to its rerun node
   (the checkpointer owns that result: its steps are not asked). The note
   records which task asked each step (:mod:`._langgraph_tasks`), and keeps
   filing the steps a resume kept under their task until the task finishes,
   asked again or not (a rerun task may stop at the next interrupt before
   it asks them: the next resume must still replay them), and every recorded
   tool step the invocation left unasked (an earlier attempt's, finished or
   in flight when it was killed: the checkpointer holds no outcome of it, so
   it is replayed or settled by the in-flight rule, never run anew). Each
   step's task is also journaled as the step begins (a ``langgraph_step``
   note, durable with the tool's result, before the graph sees it): a
   resume that dies after LangGraph saved a task's writes, before its next
   interrupt note, leaves steps no interrupt note names; the next resume
   answers those whose task's writes the checkpointer hands back. Tool calls
   the graph left running when it stopped (``asyncio.gather`` in an async
   ``ToolNode`` lets the interrupt out first) are waited for before the run
   suspends, so their outcomes are journaled.

4. Each checkpoint an invocation writes carries the run id in its metadata
   (``redrive_run_id``); a ``Command(resume=...)`` under another run id for
   an interrupt that run journaled is refused before anything runs
   (:class:`InterruptResumedElsewhereError`: the other run alone can replay
   the interrupted node's tool calls).

Outside a run they are ``graph.invoke`` / ``graph.ainvoke``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from ..errors import NextStep, NextStepAction, ReplayError
from ..replay import (
    RecordedStep,
    Run,
    answer_steps,
    answered_before,
    await_open_tools,
    current_run,
    open_tools,
    refuse_new_tools,
    suspend,
    unreplayed_steps,
    wait_open_tools,
    watch_steps,
    write_queued,
)

try:
    from langgraph.types import Command
except ImportError as err:  # pragma: no cover - exercised without the extra
    from ._common import missing_extra

    raise missing_extra("langgraph", "langchain", err) from err

from ._langgraph_tasks import (
    UNKNOWN_TASK,
    TaskSteps,
    aread_returned,
    handed_back,
    kept_tasks,
    read_returned,
    rerun_tasks,
    returned_by,
    saved_tasks,
)

__all__ = ["InterruptResumedElsewhereError", "ainvoke", "invoke"]

#: value step: the checkpoint id an invocation starts from (None: a new thread)
START_STEP = "langgraph_start"
#: note: an invocation ended at an interrupt
INTERRUPT_NOTE = "langgraph_interrupt"
#: note: the task path that asked a step, journaled as the step completes
STEP_NOTE = "langgraph_step"
#: checkpoint metadata key: the run id an invocation ran under
RUN_METADATA = "redrive_run_id"
#: when tool steps are refused (see :func:`redrive.replay.refuse_new_tools`)
_STOPPED = "the graph invocation stopped at an interrupt"


def _thread(config: Any) -> str:
    """The ``thread_id`` of ``config``.

    Raises:
        ValueError: no ``configurable.thread_id`` (a checkpointer needs one to resume).
    """
    thread = ((config or {}).get("configurable") or {}).get("thread_id")
    if thread is None:
        raise ValueError(
            "redrive.integrations.langgraph.invoke needs config={'configurable': "
            "{'thread_id': ...}} and a graph compiled with a checkpointer: the checkpointer "
            "keeps the graph's state between invocations, redrive the steps inside one"
        )
    return str(thread)


def _checkpoint_of(snapshot: Any) -> str | None:
    """The checkpoint id of a ``StateSnapshot`` (None for a thread with no checkpoint)."""
    config = getattr(snapshot, "config", None) or {}
    found = (config.get("configurable") or {}).get("checkpoint_id")
    return None if found is None else str(found)


@attrs.frozen
class _Interrupt:
    """The last interrupt note of a thread: where it is, and which tasks' steps it names."""

    seq: int
    checkpoint: str | None
    #: ``{task id: [seq, ...]}``: the steps each task asked for in the invocation that
    #: stopped there (None: a note written before tasks were recorded)
    tasks: dict[str, Any] | None
    #: the seq of the last model step before the note (the rule of such older notes)
    last_model: int
    #: ``{task path: [seq, ...]}`` of the steps after the note (step notes): made by a
    #: resume that died before its next note
    later: dict[str, list[int]] = attrs.field(factory=dict)

    def resume_from(
        self, run: Run, start: Any, returned: dict[str, set[str]], *, superseded: bool
    ) -> dict[str, list[int]]:
        """Mark the steps before the note answered, except those the resume asks again.

        Kept askable: the steps of the tasks LangGraph runs again from
        snapshot ``start`` (:func:`rerun_tasks`; ``superseded``: the thread
        has moved past it), model or tool, but for those of a ``@task``
        whose saved result the checkpointer hands back (``returned``,
        :func:`read_returned`). A note written before tasks were recorded
        keeps the tool steps after the last model step before it.

        Returns:
            The kept steps by task path (``""`` for such an older note's),
            with a handed-back ``@task``'s: the invocation carries them into
            its own note (:class:`TaskSteps`), asked again or not, since
            their task runs again until it finishes.
        """
        if self.tasks is not None:
            rerun = rerun_tasks(start, superseded=superseded)
            # a handed-back @task stays filed: a resume pinned past its checkpoint reruns it
            carried = kept_tasks(self.tasks, rerun)
            asked = kept_tasks(self.tasks, rerun, returned)
            kept = {seq for seqs in asked.values() for seq in seqs}
            answered_before(run, self.seq, lambda step: step.seq in kept)
            # a resume that died after LangGraph saved a task's writes, before its next
            # note: the task's writes are handed back, its steps are not asked again
            saved = saved_tasks(start, superseded=superseded)
            answer_steps(
                run,
                {
                    seq
                    for task, seqs in self.later.items()
                    if handed_back(task, saved) or returned_by(task, returned)
                    for seq in seqs
                },
            )
            for task, seqs in kept_tasks(self.later, rerun).items():
                carried[task] = sorted({*carried.get(task, ()), *seqs})
            return carried
        turn, older = self.last_model, set[int]()

        def keep(step: RecordedStep) -> bool:
            if step.kind == "tool" and step.seq > turn:
                older.add(step.seq)
                return True
            return False

        answered_before(run, self.seq, keep)
        return {UNKNOWN_TASK: sorted(older)} if older else {}


def _last_interrupt(run: Run, thread: str) -> tuple[_Interrupt | None, dict[int, str]]:
    """The last interrupt note of ``thread`` in ``run``'s journal (or None), and the noted seqs.

    The noted seqs are those of every step a step note files (any thread's),
    each with the thread its note names.
    """
    found: _Interrupt | None = None
    last_model = -1
    steps: list[tuple[int, str]] = []  # this thread's (seq, task) step notes
    noted: dict[int, str] = {}
    for frame in run.frames():
        if frame.kind == "model_request":
            last_model = frame.seq
        if frame.kind != "note" or frame.name not in (INTERRUPT_NOTE, STEP_NOTE):
            continue
        data = (frame.data() or {}).get("data") or {}
        if frame.name == STEP_NOTE:
            seq = data.get("seq")
            if isinstance(seq, int):
                noted[seq] = str(data.get("thread"))
                if data.get("thread") == thread:
                    steps.append((seq, str(data.get("task") or UNKNOWN_TASK)))
        elif data.get("thread") == thread:
            tasks = data.get("tasks")
            found = _Interrupt(
                frame.seq,
                data.get("checkpoint"),
                tasks if isinstance(tasks, dict) else None,
                last_model,
            )
    if found is not None:
        for seq, task in steps:
            if seq > found.seq:
                found.later.setdefault(task, []).append(seq)
    return found, noted


class InterruptResumedElsewhereError(ReplayError):
    """A ``Command(resume=...)`` was sent under another run than the one the interrupt paused.

    LangGraph re-executes the interrupted node from its start; only the run
    that journaled the node's first execution can replay its finished tool
    calls, so resuming under another run id would run their side effects twice.
    """


def _owner(snapshot: Any) -> str | None:
    """The run id the thread's latest checkpoint was written under (None: not by redrive)."""
    found = (getattr(snapshot, "metadata", None) or {}).get(RUN_METADATA)
    return None if found is None else str(found)


def _refuse_other_owner(run: Run, thread: str, owner: str) -> InterruptResumedElsewhereError:
    return InterruptResumedElsewhereError(
        f"run {run.run_id!r}: graph thread {thread!r} is paused at an interrupt that run "
        f"{owner!r} journaled; resuming it here would re-execute the interrupted node's "
        f"tool calls live (a side effect twice). Nothing was invoked.",
        run_id=run.run_id,
    ).with_next_steps(
        (
            NextStep(
                NextStepAction.RESUME,
                f"send the Command(resume=...) under run_id {owner!r}, in "
                f"redrive.run(journal, {owner!r})",
                {"run_id": owner},
            ),
        )
    )


def _resuming(
    run: Run, input: Any, config: Any, snapshot: Any
) -> tuple[_Interrupt | None, dict[int, str]]:
    """The interrupt an invocation resumes (a ``Command(resume=...)`` this run journaled).

    Returns:
        The interrupt (None: the invocation resumes none), and the seqs of
        the steps step notes already file (:func:`_last_interrupt`).

    Raises:
        InterruptResumedElsewhereError: a resume of an interrupt another run journaled.
    """
    thread = _thread(config)
    found, noted = _last_interrupt(run, thread)
    if not (isinstance(input, Command) and input.resume is not None):
        return None, noted
    owner = _owner(snapshot)
    if found is None and owner is not None and owner != run.run_id:
        raise _refuse_other_owner(run, thread, owner)
    return found, noted


def _filing(
    run: Run, thread: str, tasks: TaskSteps, noted: dict[int, str]
) -> Callable[[int], None]:
    """The step watcher of an invocation: file each step under its task, and journal it.

    The step note makes the task of a step known even when the invocation
    dies before its interrupt note (a 503 after a task's writes were saved):
    the next resume answers the steps of tasks whose writes LangGraph hands
    back. A tool step is seen as it begins (:func:`watch_steps`): its note
    is durable with its result, so before LangGraph can save the task's
    writes. A step already noted (replayed) is not noted again.
    """

    def saw(seq: int) -> None:
        task = tasks.saw(seq)
        if seq in noted:
            return
        noted[seq] = thread
        try:
            run.note(STEP_NOTE, {"thread": thread, "seq": seq, "task": task})
        except Exception:  # a watcher never raises (the run ended: its end says why)
            return

    return saw


def _pinned(config: Any, checkpoint: str | None) -> Any:
    """``config`` naming ``checkpoint`` (the state a resume starts from)."""
    return {
        **(config or {}),
        "configurable": {**(config or {}).get("configurable", {}), "checkpoint_id": checkpoint},
    }


def _before(run: Run, config: Any, snapshot: Any, found: _Interrupt | None) -> tuple[Any, bool]:
    """Prepare an invocation in ``run``: the config to invoke with, and whether to reset.

    Args:
        run: the active run.
        config: the caller's config.
        snapshot: the thread's latest ``StateSnapshot``.
        found: the interrupt this invocation resumes (its steps already
            marked answered), or None.

    Returns:
        ``(config, delete)``: the config (tagged with the run id, pinned to
        the journaled start checkpoint when a crashed attempt moved the
        thread on), and whether the thread must be deleted first (the run
        created it, and a crashed attempt left checkpoints in it).
    """
    thread = _thread(config)
    latest = _checkpoint_of(snapshot)
    start: str | None
    if found is not None:
        start = found.checkpoint
    else:
        start = run.value_step(START_STEP, thread, lambda: latest)
        write_queued(run)  # durable before the graph writes its first checkpoint
    used = {**(config or {})}
    used["metadata"] = {**used.get("metadata", {}), RUN_METADATA: run.run_id}
    if start is None or start == latest:
        # a finished run's thread has moved on: it is never reset
        return used, start is None and latest is not None and run.live and not run.finished
    return _pinned(used, start), False


def _interrupts(output: Any) -> list[Any]:
    """The interrupts an invocation's output reports (``__interrupt__``), or []."""
    if isinstance(output, dict):
        return list(output.get("__interrupt__") or [])
    return []


def _after(
    run: Run,
    config: Any,
    output: Any,
    checkpoint: str | None,
    tasks: TaskSteps,
    noted: dict[int, str],
) -> Any:
    """Suspend ``run`` (the invocation stopped at an interrupt at ``checkpoint``).

    The note files, besides the steps of the tasks, every recorded tool step
    of this thread the invocation left unasked (an earlier attempt's: done,
    or in flight when it was killed; ``noted``: the thread each step note
    names, :func:`_last_interrupt`): the next resume keeps them askable, so
    they replay or are settled, never run anew (:meth:`TaskSteps.keep`).
    """
    found = _interrupts(output)
    thread = _thread(config)
    tasks.keep(
        step.seq
        for step in unreplayed_steps(run) or ()
        if step.kind == "tool" and noted.get(step.seq, thread) == thread
    )
    shown = [
        {"id": str(getattr(i, "id", "")), "value": repr(getattr(i, "value", i))} for i in found
    ]
    run.note(
        INTERRUPT_NOTE,
        {
            "thread": thread,
            "checkpoint": checkpoint,
            "interrupts": shown,
            "tasks": tasks.by_task(),
        },
    )
    raise suspend(
        f"run {run.run_id!r}: graph thread {thread!r} stopped at interrupt(s) "
        f"{[i['value'] for i in shown]}; read them from graph.get_state(config).interrupts, "
        "then resume with invoke(graph, Command(resume=...), config) under the same run_id"
    )


def invoke(graph: Any, input: Any, config: Any = None, **options: Any) -> Any:
    """Call ``graph.invoke(input, config, **options)``, journaled as described in the module.

    Args:
        graph: a compiled LangGraph graph with a checkpointer.
        input: the graph's input, or a ``langgraph.types.Command``.
        config: the run config; ``configurable.thread_id`` is required inside a run.
        **options: further keyword arguments for ``graph.invoke``.

    Returns:
        What ``graph.invoke`` returns.

    Raises:
        ValueError: inside a run, ``config`` names no thread.
        InterruptResumedElsewhereError: ``input`` is a ``Command(resume=...)``
            for an interrupt another run journaled (nothing is invoked).
        BaseException (private): the invocation stopped at an interrupt: the
            run is suspended and its block ends. Do not catch it.
    """
    run = current_run()
    if run is None:
        return graph.invoke(input, config, **options)
    latest = graph.get_state(config)
    found, noted = _resuming(run, input, config, latest)
    carried: dict[str, list[int]] = {}
    if found is not None:
        moved = found.checkpoint != _checkpoint_of(latest)
        # subgraphs=True: a subgraph task's state is its own snapshot (what it runs again)
        start = graph.get_state(
            _pinned(config, found.checkpoint) if moved else config, subgraphs=True
        )
        returned = read_returned(graph, start, superseded=moved)
        carried = found.resume_from(run, start, returned, superseded=moved)
    used, delete = _before(run, config, latest, found)
    if delete:
        graph.checkpointer.delete_thread(_thread(config))
    tasks, open_before = TaskSteps(carried), open_tools(run)
    stop = watch_steps(run, _filing(run, _thread(config), tasks, noted))
    try:
        output = graph.invoke(input, used, **options)
        if _interrupts(output):  # a tool call the graph left behind: refused, or waited for
            refuse_new_tools(run, _STOPPED)
        wait_open_tools(run, open_before)  # a tool call the graph left running ends first
    finally:
        stop()
    if not _interrupts(output):
        return output
    return _after(run, config, output, _checkpoint_of(graph.get_state(config)), tasks, noted)


async def ainvoke(graph: Any, input: Any, config: Any = None, **options: Any) -> Any:
    """The async face of :func:`invoke` (``graph.ainvoke``); same arguments and errors."""
    run = current_run()
    if run is None:
        return await graph.ainvoke(input, config, **options)
    latest = await graph.aget_state(config)
    found, noted = _resuming(run, input, config, latest)
    carried: dict[str, list[int]] = {}
    if found is not None:
        moved = found.checkpoint != _checkpoint_of(latest)
        # subgraphs=True: a subgraph task's state is its own snapshot (what it runs again)
        start = await graph.aget_state(
            _pinned(config, found.checkpoint) if moved else config, subgraphs=True
        )
        returned = await aread_returned(graph, start, superseded=moved)
        carried = found.resume_from(run, start, returned, superseded=moved)
    used, delete = _before(run, config, latest, found)
    if delete:
        await graph.checkpointer.adelete_thread(_thread(config))
    tasks, open_before = TaskSteps(carried), open_tools(run)
    stop = watch_steps(run, _filing(run, _thread(config), tasks, noted))
    try:
        output = await graph.ainvoke(input, used, **options)
        if _interrupts(output):  # a tool call the graph left behind: refused, or waited for
            refuse_new_tools(run, _STOPPED)
        # asyncio.gather (ToolNode) lets an interrupt out while sibling tool calls run on
        await await_open_tools(run, open_before)
    finally:
        stop()
    if not _interrupts(output):
        return output
    checkpoint = _checkpoint_of(await graph.aget_state(config))
    return _after(run, config, output, checkpoint, tasks, noted)
