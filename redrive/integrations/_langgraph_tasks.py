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
* :func:`kept_tasks` joins the two;
* :func:`saved_tasks` / :func:`handed_back`: the other side, the tasks whose
  writes the checkpointer hands back, for the steps after the last note (a
  resume that died after a task's writes were saved, before its next note:
  each step's task is journaled in a step note as the step begins);
* :func:`task_levels` / :func:`returned_tasks` / :func:`returned_by`: the
  ``@task``s (functional API) whose saved result the checkpointer hands back
  though the node or entrypoint that called them runs again.

A ``@task`` runs as a PUSH task under its node or entrypoint (its steps are
filed under ``"node|push"``), and its result is a ``__return__`` write saved
with its level's checkpoint, which ``get_state().tasks`` does not list. A
node that runs again on resume calls the ``@task`` again, and LangGraph hands
the saved result back instead of running it (langgraph#6792, #6577's shapes):
the ``@task``'s steps are answered by the checkpointer, not kept askable (kept,
they were never asked: ``DivergenceError`` at the resume's end). They stay
filed under their path in the next note all the same: a resume pinned to a
checkpoint the thread has moved past runs the ``@task`` again (it replays from
the journal), while a subgraph level resumes from its own latest checkpoint and
hands back what it saved (a finished subgraph hands back its output whole).

A task run again may stop before it asks a step it asked in an earlier
invocation: its ``interrupt()`` (or a sibling call's, in a ``ToolNode``)
gets out first, and a call not yet begun is refused (langgraph#6533's shape:
a charge and two interrupting calls in one turn). The step is still the
task's, unanswered by the checkpointer, and the task runs again on the next
resume: so the steps a resume kept are filed under their task in the next
note whether or not they were asked again (``TaskSteps(carried)``). Filed
only under what the invocation asked, the charge fell out of the note, the
next resume took it as answered by the checkpointer, and the task's rerun
charged the card again.

A step no task's context names (made by a thread that lost LangGraph's
context) is filed under ``""`` and always kept: if asked again it replays,
if not the run diverges, which is the safe side (never a side effect twice).

Subgraphs (a compiled graph added as a node, or invoked from inside a node)
keep checkpoints of their own: when the parent task runs again, the
subgraph resumes from its checkpoint and runs again only *its* tasks
without saved writes (langgraph#4796's shape). So a step is filed under the
path of task ids from the top-level task down (``"top|sub|..."``), and a
resume keeps it only when every task on that path runs again.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import Any

from langchain_core.runnables.config import var_child_runnable_config

__all__ = [
    "UNKNOWN_TASK",
    "TaskSteps",
    "aread_returned",
    "handed_back",
    "kept_tasks",
    "read_returned",
    "rerun_tasks",
    "returned_by",
    "returned_tasks",
    "saved_tasks",
    "task_levels",
    "task_of_caller",
]

#: the task a step is filed under when no LangGraph task's config is in its context
UNKNOWN_TASK = ""


#: joins the task ids of a path (a subgraph's task under its parent's)
SEP = "|"
#: a rerun mark's suffix: every step under this task path is kept
_ALL = SEP + "*"


def task_of_caller() -> str:
    """The task path (``"top_id|sub_id|..."``) whose context the caller runs in, or ``""``.

    Read from the runnable config LangChain keeps in a context variable:
    its ``langgraph_checkpoint_ns`` metadata (``"node:task_id"``, nested
    graphs joined by ``|``; the first part is the top-level task). A part
    without a task id ends the path.
    """
    config = var_child_runnable_config.get() or {}
    namespace = (config.get("metadata") or {}).get("langgraph_checkpoint_ns") or (
        config.get("configurable") or {}
    ).get("checkpoint_ns")
    if not isinstance(namespace, str):
        return UNKNOWN_TASK
    ids: list[str] = []
    for part in namespace.split(SEP):
        if ":" not in part:
            break
        ids.append(part.rsplit(":", 1)[1])
    return SEP.join(ids)


class TaskSteps:
    """The seqs of the steps one invocation's tasks asked for (a step watcher).

    Pass :meth:`saw` to :func:`redrive.replay.watch_steps`; :meth:`by_task`
    is what the interrupt note stores.

    Args:
        carried: steps filed before the invocation began (``{task path: seqs}``):
            those a resume kept askable (:func:`kept_tasks`), which stay the
            task's even if this invocation stops before asking them again.
    """

    def __init__(self, carried: Mapping[str, Any] | None = None) -> None:
        self._lock = threading.Lock()
        self._seqs: dict[str, set[int]] = {
            task: {int(seq) for seq in seqs} for task, seqs in (carried or {}).items()
        }

    def saw(self, seq: int) -> str:
        """File step ``seq`` under the task of the calling flow; return its path (never raises).

        A step kept under ``""`` (:meth:`keep`: no task was known for it) is
        moved under the task now seen asking it.
        """
        task = task_of_caller()
        with self._lock:
            self._seqs.setdefault(task, set()).add(seq)
            unknown = self._seqs.get(UNKNOWN_TASK)
            if task != UNKNOWN_TASK and unknown is not None and seq in unknown:
                unknown.discard(seq)
                if not unknown:
                    del self._seqs[UNKNOWN_TASK]
        return task

    def keep(self, seqs: Iterable[int]) -> None:
        """File the steps ``seqs`` the invocation left unasked under ``""`` (always kept).

        For the recorded tool steps an earlier attempt made (finished, or in
        flight when it was killed) that the invocation stopped before asking
        again: the checkpointer holds no outcome of theirs, so the next
        resume must keep them askable whatever the tasks it runs again (an
        earlier attempt's task ids may name no task of this thread any more).
        A step already filed under a task stays there.
        """
        with self._lock:
            filed: set[int] = set().union(*self._seqs.values())
            left = {int(seq) for seq in seqs} - filed
            if left:
                self._seqs.setdefault(UNKNOWN_TASK, set()).update(left)

    def by_task(self) -> dict[str, list[int]]:
        """``{task id: sorted seqs}`` (``""``: steps no task's context named)."""
        with self._lock:
            return {task: sorted(seqs) for task, seqs in sorted(self._seqs.items())}


def rerun_tasks(snapshot: Any, *, superseded: bool, prefix: str = "") -> set[str]:
    """The task paths LangGraph runs again when a resume starts from ``snapshot``.

    LangGraph's rule (``langgraph.pregel._loop``, ``_first``): "Finished
    tasks rerun only on time travel, or on a resume at a checkpoint the
    thread has moved past. A resume addressed at the thread's latest
    checkpoint hands their writes back, as without an id." A subgraph task
    that runs again resumes its subgraph from the subgraph's own latest
    checkpoint, where the same rule applies one level down.

    Args:
        snapshot: the ``StateSnapshot`` of the checkpoint the resume starts
            from (``graph.get_state(config, subgraphs=True)``, with its
            ``checkpoint_id`` when it is pinned; a task's ``state`` is then
            its subgraph's snapshot).
        superseded: the resume is pinned to a checkpoint the thread has
            moved past (a later checkpoint exists).
        prefix: the path of the parent task (``""`` at the top).

    Returns:
        Rerun marks for :func:`kept_tasks`: the path of each task run again
        (every pending task when ``superseded``, else those with no saved
        result), and ``path + "|*"`` where every step under it is kept (no
        subgraph state: a plain node, or a subgraph whose state is unknown).
        A subgraph task's own tasks are read from its snapshot with
        ``superseded=False`` even under a pinned parent: a
        ``Command(resume=...)`` pinned to a checkpoint is no time travel, so
        LangGraph resumes the subgraph from its latest checkpoint.
    """
    marks: set[str] = set()
    for task in getattr(snapshot, "tasks", None) or ():
        if not (superseded or getattr(task, "result", None) is None):
            continue
        path = f"{prefix}{task.id}"
        marks.add(path)
        nested = getattr(task, "state", None)
        if not hasattr(nested, "tasks"):
            marks.add(path + _ALL)
        else:  # a subgraph resumes from its own latest checkpoint, pinned parent or not
            marks |= rerun_tasks(nested, superseded=False, prefix=path + SEP)
    return marks


def task_levels(snapshot: Any, *, superseded: bool, prefix: str = "") -> list[tuple[str, Any]]:
    """The checkpoints whose saved ``@task`` results a resume from ``snapshot`` hands back.

    A ``@task`` (functional API) runs as a PUSH task under the node or
    entrypoint that called it (its steps are filed under ``"node|push"``);
    its result is a ``__return__`` write saved with the checkpoint of its
    graph level, which ``get_state().tasks`` does not list. When the node
    runs again, LangGraph hands that write back instead of running the
    ``@task`` (langgraph#6792, #6577), unless the level's checkpoint is one
    the thread has moved past (a pinned resume reruns every task of it). A
    subgraph level resumes from its own latest checkpoint even under a pinned
    parent, so it always counts.

    Args:
        snapshot: as for :func:`rerun_tasks` (``subgraphs=True``).
        superseded: as for :func:`rerun_tasks`.
        prefix: the path of the parent task (``""`` at the top).

    Returns:
        ``[(level prefix, checkpoint config), ...]``: read each config's
        ``pending_writes`` with the checkpointer (``get_tuple`` /
        ``aget_tuple``) and pass them to :func:`returned_tasks`.
    """
    levels: list[tuple[str, Any]] = []
    config = getattr(snapshot, "config", None)
    if not superseded and config:
        levels.append((prefix, config))
    for task in getattr(snapshot, "tasks", None) or ():
        nested = getattr(task, "state", None)
        if hasattr(nested, "tasks") and (superseded or getattr(task, "result", None) is None):
            levels += task_levels(nested, superseded=False, prefix=f"{prefix}{task.id}{SEP}")
    return levels


#: the channel a ``@task``'s (PUSH task's) result is written to
_RETURN = "__return__"


def returned_tasks(levels: Iterable[tuple[str, Any]]) -> dict[str, set[str]]:
    """``{level prefix: ids of the @tasks whose saved result is handed back}``.

    Args:
        levels: ``(prefix, checkpoint tuple)`` for each of :func:`task_levels`
            (a tuple None, or without ``pending_writes``, holds none).
    """
    returned: dict[str, set[str]] = {}
    for prefix, saved in levels:
        writes = getattr(saved, "pending_writes", None) or ()
        ids = {str(write[0]) for write in writes if len(write) > 1 and write[1] == _RETURN}
        if ids:
            returned.setdefault(prefix, set()).update(ids)
    return returned


def read_returned(graph: Any, start: Any, *, superseded: bool) -> dict[str, set[str]]:
    """:func:`returned_tasks` of a resume from ``start``, read with ``graph.checkpointer``.

    A graph without a checkpointer of its own hands nothing back here.
    """
    saver: Any = getattr(graph, "checkpointer", None)
    if not hasattr(saver, "get_tuple"):
        return {}
    levels = task_levels(start, superseded=superseded)
    return returned_tasks((at, saver.get_tuple(level)) for at, level in levels)


async def aread_returned(graph: Any, start: Any, *, superseded: bool) -> dict[str, set[str]]:
    """The async face of :func:`read_returned` (``aget_tuple``)."""
    saver: Any = getattr(graph, "checkpointer", None)
    if not hasattr(saver, "aget_tuple"):
        return {}
    levels = task_levels(start, superseded=superseded)
    return returned_tasks([(at, await saver.aget_tuple(level)) for at, level in levels])


def returned_by(path: str, returned: Mapping[str, set[str]]) -> bool:
    """Whether the step filed under ``path`` ran in a ``@task`` whose result is handed back.

    The step's path runs through the level's prefix, the node (or
    entrypoint) task that called the ``@task``, then the ``@task``'s id
    (``@task``s calling ``@task``s add theirs): a step under any handed-back
    ``@task`` is not asked again. A step under ``""`` never is.
    """
    if path == UNKNOWN_TASK:
        return False
    for prefix, ids in returned.items():
        if path.startswith(prefix) and any(
            part in ids for part in path[len(prefix) :].split(SEP)[1:]
        ):
            return True
    return False


def saved_tasks(snapshot: Any, *, superseded: bool, prefix: str = "") -> set[str]:
    """The task paths whose writes LangGraph hands back when a resume starts from ``snapshot``.

    The other side of :func:`rerun_tasks`: a pending task with a saved
    result is not run again (nor anything under it); a pending subgraph task
    without one runs again and its subgraph hands back its own saved tasks.
    A resume pinned to a checkpoint the thread has moved past (``superseded``)
    hands back nothing of that level, but its subgraphs resume from their own
    latest checkpoint: one that finished (no task pending) hands its output
    back whole (mark ``path + "|*"``: every step under the path).
    """
    saved: set[str] = set()
    for task in getattr(snapshot, "tasks", None) or ():
        path = f"{prefix}{task.id}"
        if not superseded and getattr(task, "result", None) is not None:
            saved.add(path)
            continue
        nested = getattr(task, "state", None)
        if not hasattr(nested, "tasks"):
            continue
        config = getattr(nested, "config", None) or {}
        if not getattr(nested, "tasks", None) and (config.get("configurable") or {}).get(
            "checkpoint_id"
        ):
            saved.add(path + _ALL)
        else:
            saved |= saved_tasks(nested, superseded=False, prefix=path + SEP)
    return saved


def handed_back(path: str, saved: set[str]) -> bool:
    """Whether the step filed under ``path`` was made by a task in ``saved`` (or under one)."""
    if path == UNKNOWN_TASK:
        return False
    parts = path.split(SEP)
    return any(SEP.join(parts[:end]) in saved for end in range(1, len(parts) + 1)) or any(
        SEP.join(parts[:end]) + _ALL in saved for end in range(1, len(parts))
    )


def _rerun(path: str, marks: set[str]) -> bool:
    """Whether the step filed under ``path`` is asked again (see :func:`rerun_tasks`)."""
    if path == UNKNOWN_TASK or path in marks:
        return True
    parts = path.split(SEP)
    return any(SEP.join(parts[:end]) + _ALL in marks for end in range(1, len(parts)))


def kept_tasks(
    by_task: Mapping[str, Any],
    rerun: set[str],
    returned: Mapping[str, set[str]] | None = None,
) -> dict[str, list[int]]:
    """The entries of ``by_task`` whose steps a resume keeps askable: tasks run again, unnamed.

    Args:
        by_task: the interrupt note's ``tasks`` map (``{task path: [seq, ...]}``;
            notes written before subgraphs were followed hold top-level ids).
        rerun: :func:`rerun_tasks` of the checkpoint the resume starts from.
        returned: :func:`returned_tasks`: steps of a ``@task`` whose saved
            result LangGraph hands back are not kept, though their node runs again.

    Returns:
        ``{task path: sorted seqs}``: what the resume keeps, and what the
        invocation's :class:`TaskSteps` carries into the next note.
    """
    return {
        task: sorted(int(seq) for seq in seqs)
        for task, seqs in by_task.items()
        if _rerun(task, rerun) and not returned_by(task, returned or {})
    }
