"""What changed: a run's fingerprint against the current code, before any replay.

:func:`run_fingerprint` reads what shaped a run (see
:mod:`redrive.replay._fingerprint`). :func:`what_changed` imports the run's
entrypoint as ``redrive check`` does (which defines its tools), compares the
recorded fingerprint with the current one, and names the recorded steps the
differences make unreplayable under strict replay. With ``replay=True`` it
re-drives the run replay-only over a private in-memory copy (nothing runs live,
the journal is not touched), matching steps exactly as a resume does: a step
that replay answers is replayable whatever its tool's fingerprint says (a
parameter added at its default keeps a call, CONTRACT C1), and the first step
that drifts (a model step whose prompt changed, a tool called otherwise) is
unreplayable. Only the steps the replay does not reach (or all, with
``replay=False``) are judged from the fingerprint: a tool that is gone, or a
recorded argument that is no longer a parameter, never replays.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Sequence
from typing import Any

import attrs

from ._dryreport import past_live, raised_where
from ._entry import call_args as _call_args
from ._entry import drive as _drive
from ._entry import import_paths as _import_paths
from ._entry import private_copy as _copy
from ._entry import resolve as _resolve
from ._promptcheck import prompt_changes
from .errors import DivergenceError, ReplayMissError, UnknownRunError
from .frames import Kind
from .replay import (
    Fingerprint,
    RecordedStep,
    Run,
    app_version,
    current_tools,
    declared_params,
    dropped_arguments,
    iter_steps,
    read_fingerprint,
    unreplayed_steps,
)
from .storage import Journal, RunStatus

__all__ = [
    "Change",
    "StepAtRisk",
    "WhatChanged",
    "fingerprint_lines",
    "recorded_app_version",
    "run_fingerprint",
    "what_changed",
]


def recorded_app_version(journal: Journal, run_id: str) -> str | None:
    """The app version recorded in a run's ``run_start`` (reads one frame), or None."""
    first = next(iter(journal.frames(run_id)), None)
    if first is None or first.kind != Kind.RUN_START.value:
        return None
    fp = first.data().get("fingerprint")
    version = fp.get("app_version") if isinstance(fp, dict) else None
    return version if isinstance(version, str) else None


def fingerprint_lines(fp: Fingerprint) -> list[str]:
    """A fingerprint as a few lines for ``redrive show``."""
    lines = [
        f"app version {fp.app_version or '-'} ({fp.app_version_source})  "
        f"redrive {fp.redrive or '-'}  tools {len(fp.tools)}",
    ]
    if fp.models:
        lines.append("models: " + ", ".join(fp.models))
    if fp.prompts:
        lines.append("system prompts (hashes): " + ", ".join(fp.prompts))
    if fp.reasked:
        lines.append(
            "resumed across a code change: model step(s) re-asked live at seq "
            + ", ".join(map(str, fp.reasked))
            + " (on_drift='continue_live')"
        )
    return lines


def run_fingerprint(journal: Journal, run_id: str) -> Fingerprint:
    """Return what shaped run ``run_id``: entrypoint, app version, tools, models, prompts.

    Runs recorded before fingerprints have only the entrypoint, redrive's
    version and what their model steps show (``app_version_source`` is
    ``"unrecorded"``).

    Raises:
        UnknownRunError: no such run. JournalCorruptError: a damaged record.
    """
    if journal.get_run(run_id) is None:
        raise UnknownRunError(
            f"no run {run_id!r} in journal {journal.url}; list runs with `redrive runs`",
            run_id=run_id,
        )
    return read_fingerprint(run_id, journal.frames(run_id))


@attrs.frozen(kw_only=True)
class Change:
    """One part of a fingerprint that differs.

    ``part`` names it (``app_version``, ``tool:NAME``, ``prompt:HASH``...);
    ``counted`` is False for a note that does not make the run changed.
    """

    part: str
    recorded: Any
    current: Any
    detail: str = ""
    counted: bool = True

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data."""
        return {
            "part": self.part,
            "recorded": self.recorded,
            "current": self.current,
            "detail": self.detail,
            "counted": self.counted,
        }


@attrs.frozen(kw_only=True)
class StepAtRisk:
    """A recorded step a change makes unreplayable (``blocking``) or may affect."""

    seq: int
    kind: str
    name: str
    why: str
    blocking: bool = True

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data."""
        return {
            "seq": self.seq,
            "kind": self.kind,
            "name": self.name,
            "why": self.why,
            "blocking": self.blocking,
        }


@attrs.frozen(kw_only=True)
class WhatChanged:
    """A run's recorded fingerprint against the current code.

    Attributes:
        run_id: the run.
        recorded: its recorded :class:`Fingerprint`.
        current_app_version: the application's version now (as a new run would record it).
        changes: the parts that differ.
        steps: the recorded steps the changes make unreplayable under strict
            replay (``blocking``) or may affect, in seq order.
        replayed: with ``replay=True``: how many steps replayed before the first
            drift (or all of them); None without it.
        first_drift: the first divergence's report (replay=True), or "".
        undetermined: why the replay could not tell whether a strict resume
            replays (it stopped where a resume goes live while recorded steps
            were still unreplayed: what the code asks after a live step is
            unknown), or "" when it could.
    """

    run_id: str
    recorded: Fingerprint
    current_app_version: str | None
    changes: tuple[Change, ...]
    steps: tuple[StepAtRisk, ...]
    replayed: int | None = None
    first_drift: str = ""
    undetermined: str = ""

    @property
    def changed(self) -> bool:
        """True when anything differs (a fingerprint part, or a drifting step).

        A tool defined now and not when the run started is listed among the
        changes but does not count: it cannot break a replay.
        """
        return bool(self.steps) or any(c.detail != "new" and c.counted for c in self.changes)

    @property
    def strict_replay_breaks(self) -> bool:
        """True when some recorded step would not replay under strict replay."""
        return any(s.blocking for s in self.steps)

    def summary(self) -> str:
        """A few lines for a person (what the CLI prints)."""
        lines = [
            f"run {self.run_id}: recorded app version {self.recorded.app_version or '-'} "
            f"({self.recorded.app_version_source}), now {self.current_app_version or '-'}"
        ]
        if not self.changed and self.undetermined:
            lines.append(f"could not tell whether a strict resume replays: {self.undetermined}")
        elif not self.changed:
            lines.append("nothing changed that the fingerprint or a replay can see")
        for c in self.changes:
            label = "changed" if c.counted else "not compared"
            lines.append(f"  {label} {c.part}: {c.detail or f'{c.recorded!r} -> {c.current!r}'}")
        if not self.changed:
            return "\n".join(lines)
        for s in self.steps:
            mark = "unreplayable" if s.blocking else "may differ"
            lines.append(f"  seq {s.seq} {s.kind} {s.name}: {mark}: {s.why}")
        blocking = [s for s in self.steps if s.blocking]
        if any(s.kind == "tool" for s in blocking):
            tools = sorted({s.name for s in blocking if s.kind == "tool"})
            lines.append(
                f"What to do: a recorded tool call ({', '.join(tools)}) no longer replays, and "
                "continue_live cannot change that (it re-asks model steps only): resume with "
                "the code that recorded the run (its app version above), or fork the run "
                "before the first unreplayable seq with redrive.fork()."
            )
        elif blocking:
            lines.append(
                "What to do: resume with replay=ReplayPolicy(on_drift='continue_live') to "
                "re-ask drifted model steps live (completed tool steps still replay), or fork "
                "the run before the first unreplayable seq with redrive.fork()."
            )
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data."""
        return {
            "run_id": self.run_id,
            "recorded": self.recorded.to_dict(),
            "current_app_version": self.current_app_version,
            "changed": self.changed,
            "strict_replay_breaks": self.strict_replay_breaks,
            "changes": [c.to_dict() for c in self.changes],
            "steps": [s.to_dict() for s in self.steps],
            "replayed": self.replayed,
            "first_drift": self.first_drift,
            "undetermined": self.undetermined,
        }


def _tool_changes(
    recorded: dict[str, dict[str, str]], current: dict[str, dict[str, str]]
) -> tuple[list[Change], dict[str, str]]:
    """Tool differences, and per changed tool what changed: ``gone``, ``sig`` or ``decl``.

    A docstring-only change is listed and has no effect on the recorded calls.
    """
    changes: list[Change] = []
    effect: dict[str, str] = {}
    for name in sorted(set(recorded) | set(current)):
        old, new = recorded.get(name), current.get(name)
        if old == new:
            continue
        if new is None:
            changes.append(Change(part=f"tool:{name}", recorded=old, current=None, detail="gone"))
            effect[name] = "gone"
            continue
        if old is None:
            changes.append(Change(part=f"tool:{name}", recorded=None, current=new, detail="new"))
            continue
        parts = [p for p in ("sig", "decl", "doc") if old.get(p) != new.get(p)]
        words = {"sig": "signature", "decl": "declaration", "doc": "docstring"}
        detail = ", ".join(words[p] for p in parts) + " changed"
        if parts == ["doc"]:
            detail += " (its recorded calls still replay)"
        changes.append(Change(part=f"tool:{name}", recorded=old, current=new, detail=detail))
        if "sig" in parts:
            effect[name] = "sig"
        elif "decl" in parts:
            effect[name] = "decl"
    return changes, effect


def _tool_step_risk(step: RecordedStep, effect: str, reached: str) -> StepAtRisk | None:
    """How a change of its tool affects a recorded tool step (None: it replays).

    ``reached`` is ``"replayed"`` when the dry replay (the resume's own
    matching) answered the step from the record, ``"unreached"`` when it
    stopped before it or did not run. Only an unreached step is judged from
    the fingerprint: a tool that is gone, or a recorded argument that is no
    parameter of the tool now, never replays; another signature change may
    (a parameter added at its default keeps the call, C1).
    """

    def risk(why: str, blocking: bool) -> StepAtRisk:
        return StepAtRisk(seq=step.seq, kind=step.kind, name=step.name, why=why, blocking=blocking)

    if effect == "gone":
        return risk(f"tool {step.name!r} is no longer defined", True)
    if effect == "decl":
        return risk(f"tool {step.name!r} is declared differently (restart safety)", False)
    if reached == "replayed":
        return None
    params = declared_params(step.name)
    dropped = dropped_arguments(step.args, params) if params is not None else []
    if dropped:
        return risk(
            f"the signature of tool {step.name!r} changed: the recorded argument(s) "
            f"{', '.join(map(repr, dropped))} are no longer among its parameters",
            True,
        )
    return risk(
        f"the signature of tool {step.name!r} changed; the replay did not reach this step: it "
        "replays if the code asks with the recorded arguments (a parameter added at its "
        "default keeps a call)",
        False,
    )


def what_changed(
    journal: Journal,
    run_id: str,
    *,
    import_paths: Sequence[str] = (),
    replay: bool = True,
) -> WhatChanged:
    """Compare a run's fingerprint with the current code, before resuming it.

    Args:
        journal: the run's journal (read only; never written).
        run_id: the run.
        import_paths: directories put at the front of ``sys.path`` while the
            entrypoint is imported (e.g. the project's root), as ``redrive check -I``.
        replay: also re-drive the run replay-only over an in-memory copy to find
            the first drifting step (runs the entrypoint's own code; no model
            call, no tool body). False: compare fingerprints only.

    Returns:
        A :class:`WhatChanged`.

    Raises:
        UnknownRunError: no such run. JournalCorruptError: a damaged record.
    """
    recorded = run_fingerprint(journal, run_id)
    changes: list[Change] = []
    entry = recorded.entrypoint
    func: Any = None
    with _import_paths(list(import_paths)):
        if entry:
            try:
                func = _resolve(entry)
            except Exception as exc:
                changes.append(
                    Change(
                        part="entrypoint",
                        recorded=entry,
                        current=None,
                        detail=f"{entry} cannot be imported: {type(exc).__name__}: {exc}",
                    )
                )
        current_version, _source = app_version(None, entry)
        # "omitted": a test recording leaves the version out (redrive._plugin_settle)
        compared = recorded.app_version_source not in ("unrecorded", "omitted")
        if compared and recorded.app_version != current_version:
            changes.append(
                Change(part="app_version", recorded=recorded.app_version, current=current_version)
            )
        now_redrive = _redrive_version()
        if recorded.redrive and recorded.redrive != now_redrive:
            changes.append(Change(part="redrive", recorded=recorded.redrive, current=now_redrive))
        tool_changes, effect = (
            _tool_changes(recorded.tools, current_tools())
            if recorded.app_version_source != "unrecorded" and func is not None
            else ([], {})
        )
        changes.extend(tool_changes)
        replayed: int | None = None
        drift = undetermined = ""
        drift_step: StepAtRisk | None = None
        left: set[int] | None = None  # recorded steps the dry replay did not answer
        if replay and func is not None:
            replayed, drift, drift_step, left, undetermined = _dry_replay(journal, run_id, func)
        elif func is not None and entry:
            changes.extend(_prompt_changes(journal, run_id, entry))
        steps: list[StepAtRisk] = []
        for s in iter_steps(journal.frames(run_id)):
            if s.kind != "tool" or s.name not in effect or s.seq in recorded.reasked:
                continue
            if drift_step is not None and s.seq == drift_step.seq:
                continue  # the replay's own finding says more
            reached = "replayed" if left is not None and s.seq not in left else "unreached"
            risk = _tool_step_risk(s, effect[s.name], reached)
            if risk is not None:
                steps.append(risk)
        if drift_step is not None:
            steps.append(drift_step)
    steps.sort(key=lambda s: s.seq)
    return WhatChanged(
        run_id=run_id,
        recorded=recorded,
        current_app_version=current_version,
        changes=tuple(changes),
        steps=tuple(steps),
        replayed=replayed,
        first_drift=drift,
        undetermined=undetermined if not steps else "",
    )


def _prompt_changes(journal: Journal, run_id: str, entry: str) -> list[Change]:
    """The recorded system prompts the current code no longer holds (see :mod:`._promptcheck`)."""
    return [Change(**fields) for fields in prompt_changes(journal.frames(run_id), run_id, entry)]


def _dry_replay(
    journal: Journal, run_id: str, func: Any
) -> tuple[int, str, StepAtRisk | None, set[int] | None, str]:
    """Re-drive the run replay-only over a copy, as a resume would match its steps.

    Returns:
        ``(steps replayed, drift report, drifting step, seqs of the recorded
        steps it did not answer, why it could not tell)``; the fourth is None
        when that cannot be told; the last is "" unless the replay stopped
        where an unfinished run goes live with recorded steps still unreplayed
        (a step in flight re-run, a flow past its own record): a strict resume
        goes on live there and may still diverge on them.
    """
    copy = _copy(journal, run_id)
    first = next(iter(copy.frames(run_id)))
    start = first.data() if first.kind == Kind.RUN_START.value else {}
    run = Run(copy, run_id, live=False, replay="strict", entrypoint=start.get("entrypoint"))
    found: tuple[str, StepAtRisk | None] = ("", None)
    undetermined = ""
    try:
        args, kwargs = _call_args(func, start.get("input"))
        _drive(run, func, args, kwargs)
    except DivergenceError as exc:
        step = StepAtRisk(
            seq=exc.seq if exc.seq is not None else -1,
            kind=exc.kind or "?",
            name=exc.name or "?",
            why="drifts from its record under the current code"
            + (f" ({', '.join(p for p, _a, _b in exc.diff or [])})" if exc.diff else ""),
        )
        found = (str(exc), step)
    except ReplayMissError as exc:
        record = copy.get_run(run_id)
        if record is not None and record.status == RunStatus.SUCCEEDED.value:
            # a finished run's record is complete: the current code makes a call it lacks
            # (`redrive check` fails it as went_live); an unfinished run goes live there
            step = StepAtRisk(
                seq=exc.seq if exc.seq is not None else -1,
                kind=exc.kind or "?",
                name=exc.name or "?",
                why="the current code makes this call, which the finished run's record lacks",
            )
            found = (str(exc), step)
        else:
            undetermined = past_live(exc, unreplayed_steps(run) or [])
    except Exception as exc:  # the code itself fails on the recorded input
        raised = raised_where(copy, run, run_id, exc)
        step = None
        if raised is not None:
            step = StepAtRisk(seq=raised[0], kind="code", name=type(exc).__name__, why=raised[1])
        found = (f"{type(exc).__name__}: {exc}", step)
    return run.replayed_steps, found[0], found[1], _unanswered(run), undetermined


def _unanswered(run: Run) -> set[int] | None:
    """Seqs of the recorded steps a finished dry replay left unconsumed (None: unknown)."""
    left = unreplayed_steps(run)
    return None if left is None else {s.seq for s in left}


def describe_changes(journal: Journal, run_id: str) -> str:
    """One line on the fingerprint parts that differ (no replay), or "" (for ``check``)."""
    try:
        found = what_changed(journal, run_id, replay=False)
    except Exception:  # a report helper: a damaged record is reported elsewhere
        return ""
    if not found.changes:
        return ""
    return "fingerprint differences: " + "; ".join(
        f"{c.part} ({c.detail or f'{c.recorded} -> {c.current}'})" for c in found.changes
    )


def _redrive_version() -> str:
    try:
        return importlib.metadata.version("redrive")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - source checkout
        return "0"
