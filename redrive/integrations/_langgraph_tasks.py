"""Which LangGraph task asked for each step, and which tasks a resume runs again.

LangGraph runs a graph in supersteps of *tasks* (one per node to run; ids
derived from the checkpoint, so a resume from the same checkpoint gives the
same ids). When a task stops at ``interrupt()``, the checkpointer keeps the
writes of every task of that superstep that finished, and a
``Command(resume=...)`` runs again, from their start, only the tasks without
saved writes (https://langchain-ai.github.io/langgraph/concepts/human_in_the_loop/).
That set is not always the interrupted task alone: a resume that was killed
after the interrupted task finished left that task's writes behind, and the
next resume does not run it at all.

So the steps a resume must keep askable are those of the tasks the
checkpointer will run again, whatever their kind (a node may call the model
itself, then a tool, then interrupt):

* :class:`TaskSteps` watches an invocation's steps and files each one's seq
  under the task whose flow completed it (LangGraph's config in the flow's
  context names the task); the interrupt note stores the map;
* :func:`rerun_tasks` reads, from the checkpoint a resume starts from, the
  tasks LangGraph will run again (every task of it when the thread has moved
  past it, else those without saved writes);
* :func:`kept_seqs` joins the two.

A step no task's context names (made by a thread that lost LangGraph's
context) is filed under ``""`` and always kept: if asked again it replays,
if not the run diverges, which is the safe side (never a side effect twice).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from langchain_core.runnables.config import var_child_runnable_config

__all__ = ["UNKNOWN_TASK", "TaskSteps", "kept_seqs", "rerun_tasks", "task_of_caller"]

#: the task a step is filed under when no LangGraph task's config is in its context
UNKNOWN_TASK = ""


def task_of_caller() -> str:
    """The id of the top-level LangGraph task whose context the caller runs in, or ``""``.

    Read from the runnable config LangChain keeps in a context variable:
    its ``langgraph_checkpoint_ns`` metadata (``"node:task_id"``, nested
    graphs joined by ``|``; the first part is the top-level task).
    """
    config = var_child_runnable_config.get() or {}
    namespace = (config.get("metadata") or {}).get("langgraph_checkpoint_ns") or (
        config.get("configurable") or {}
    ).get("checkpoint_ns")
    if not isinstance(namespace, str) or ":" not in namespace:
        return UNKNOWN_TASK
    return namespace.split("|", 1)[0].rsplit(":", 1)[1]


class TaskSteps:
    """The seqs of the steps one invocation's tasks asked for (a step watcher).

    Pass :meth:`saw` to :func:`redrive.replay.watch_steps`; :meth:`by_task`
    is what the interrupt note stores.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seqs: dict[str, set[int]] = {}

    def saw(self, seq: int) -> None:
        """File step ``seq`` under the task of the calling flow (never raises)."""
        task = task_of_caller()
        with self._lock:
            self._seqs.setdefault(task, set()).add(seq)

    def by_task(self) -> dict[str, list[int]]:
        """``{task id: sorted seqs}`` (``""``: steps no task's context named)."""
        with self._lock:
            return {task: sorted(seqs) for task, seqs in sorted(self._seqs.items())}


def rerun_tasks(snapshot: Any, *, superseded: bool) -> set[str]:
    """The ids of the tasks LangGraph runs again when a resume starts from ``snapshot``.

    LangGraph's rule (``langgraph.pregel._loop``, ``_first``): "Finished
    tasks rerun only on time travel, or on a resume at a checkpoint the
    thread has moved past. A resume addressed at the thread's latest
    checkpoint hands their writes back, as without an id."

    Args:
        snapshot: the ``StateSnapshot`` of the checkpoint the resume starts
            from (``graph.get_state(config)``, with its ``checkpoint_id``
            when it is pinned).
        superseded: the resume is pinned to a checkpoint the thread has
            moved past (a later checkpoint exists).

    Returns:
        Every pending task's id when ``superseded``; else the ids of the
        pending tasks with no saved result (interrupted or failed ones).
    """
    tasks = getattr(snapshot, "tasks", None) or ()
    return {str(task.id) for task in tasks if superseded or getattr(task, "result", None) is None}


def kept_seqs(by_task: Mapping[str, Any], rerun: set[str]) -> set[int]:
    """The seqs of the steps a resume keeps askable: those of tasks run again, and unnamed ones.

    Args:
        by_task: the interrupt note's ``tasks`` map (``{task id: [seq, ...]}``).
        rerun: :func:`rerun_tasks` of the checkpoint the resume starts from.
    """
    kept: set[int] = set()
    for task, seqs in by_task.items():
        if task == UNKNOWN_TASK or task in rerun:
            kept.update(int(seq) for seq in seqs)
    return kept
