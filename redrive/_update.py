"""From an intended change to updated fixtures: ``redrive check --update``.

A saved run (``.rdj``) whose check fails after an intended change (a prompt
edited, an output reworded) is re-driven against the current code with the
recorded model responses kept: each model step is answered by the response
recorded at its position (``ReplayPolicy(model="warn")``), whatever its
request now is, and no model is called. Tool steps stay strict: a tool
called with other arguments, or a step the record does not have, cannot be
answered from the record, and the update says so (re-record the run live
instead: a fixture whose tools changed needs the real tools).

The result shows the path-level difference of every changed request and of
the output; with ``write=True`` the fixture is rewritten with the new
requests and output (the recorded responses and tool outcomes kept, every
frame chained anew), so ``redrive check`` passes on it.
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Iterator
from typing import Any, Literal

import attrs

from ._check import open_run_file
from ._entry import call_args as _call_args
from ._entry import drive as _drive
from ._entry import import_paths as _import_paths
from ._entry import resolve as _resolve
from ._scrub import DEFAULT
from .errors import DivergenceError, ReplayError, ReplayMissError
from .frames import GENESIS, Frame, Kind, call_key, canonical, encode, make_frame
from .replay import (
    Expander,
    ReplayDriftWarning,
    ReplayPolicy,
    Run,
    diff_values,
    expand_frames,
    format_diff,
    match_view,
)
from .storage import MemoryJournal, RunRecord, RunStatus, RunUpdate, copy_run

__all__ = ["MODELS_KEPT", "UpdateResult", "update_run"]

#: What ``update_run`` says about model calls: none was made.
MODELS_KEPT = (
    "model responses: the recorded ones, replayed by position (no model was called); "
    "to call the model live instead, re-record the run"
)

UpdateOutcome = Literal["unchanged", "changed", "written", "failed"]


@attrs.frozen(kw_only=True)
class UpdateResult:
    """What re-driving one saved run against the current code found (and wrote).

    Attributes:
        source: the ``.rdj`` path.
        run_id: the run's id (None when the file could not be read).
        outcome: ``unchanged`` (the check passes as it is), ``changed`` (the
            differences below; nothing written), ``written`` (the fixture was
            rewritten) or ``failed`` (it cannot be updated from the record).
        message: the report: each changed step's path-level difference, the
            output's, and how model calls were answered; or why it failed.
        changes: ``(seq, step name, [(path, recorded, now)])`` per changed model request.
        output_diff: ``(path, recorded, now)`` leaves of the output.
    """

    source: str
    run_id: str | None
    outcome: UpdateOutcome
    message: str
    changes: tuple[tuple[int, str, tuple[tuple[str, Any, Any], ...]], ...] = ()
    output_diff: tuple[tuple[str, Any, Any], ...] = ()

    @property
    def ok(self) -> bool:
        """True unless the run could not be updated from its record."""
        return self.outcome != "failed"


def update_run(
    source: str | os.PathLike[str], *, write: bool = False, import_paths: tuple[str, ...] = ()
) -> UpdateResult:
    """Re-drive the saved run in ``source`` with its model responses kept; diff; maybe rewrite.

    Args:
        source: an ``.rdj`` file (or its ``.jsonl`` text form) of a run started
            through ``@redrive.durable``; rewritten in the same form.
        write: rewrite ``source`` with the new requests and output when they changed.
        import_paths: directories put at the front of ``sys.path`` for the entrypoint.

    Returns:
        An :class:`UpdateResult`; a run that cannot be updated is a result
        (``failed``), not an exception.
    """
    from .storage.rdj import export_run

    label = os.fspath(source)
    try:
        rdj, run_id = open_run_file(label)
        copy = MemoryJournal(label)
        copy_run(rdj, run_id, copy)
        record = copy.get_run(run_id)
        assert record is not None
        first = next(copy.frames(run_id))
        start = first.data() if first.kind == Kind.RUN_START.value else {}
        entry = start.get("entrypoint") or record.entrypoint
    except (ReplayError, OSError, ValueError) as exc:
        return UpdateResult(
            source=label, run_id=None, outcome="failed", message=f"cannot read the run: {exc}"
        )

    def failed(message: str) -> UpdateResult:
        return UpdateResult(source=label, run_id=run_id, outcome="failed", message=message)

    if not entry:
        return failed(f"run {run_id!r} has no recorded entrypoint (start it with @redrive.durable)")
    if record.status != RunStatus.SUCCEEDED.value:
        return failed(f"run {run_id!r} is {record.status}: only a succeeded run can be updated")
    policy = ReplayPolicy(model="warn", tool="strict", value="strict")
    with _import_paths(list(import_paths)), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ReplayDriftWarning)
        try:
            func = _resolve(entry)
            args, kwargs = _call_args(func, start.get("input"))
            run = Run(copy, run_id, live=False, replay=policy, entrypoint=entry)
            output = _drive(run, func, args, kwargs)
            now = canonical(output, "output")
        except DivergenceError as exc:
            return failed(
                f"{exc}\nA tool or value step changed: its recorded outcome cannot stand for the "
                "new call. Re-record the run live (with its real tools), then keep that as the "
                "fixture."
            )
        except ReplayMissError as exc:
            return failed(
                f"{exc}\nThe current code makes a step the record does not have. Re-record the "
                "run live, then keep that as the fixture."
            )
        except Exception as exc:  # the entrypoint's own failure
            return failed(f"run {run_id!r}: the entrypoint raised {type(exc).__name__}: {exc}")
    drifts = [w.message for w in caught if isinstance(w.message, ReplayDriftWarning)]
    changes = tuple(
        (int(d.seq or 0), str(d.name), tuple(d.diff or ())) for d in drifts if d.seq is not None
    )
    output_diff = tuple(diff_values(record.output_value(), now, "$.output"))
    if not changes and not output_diff:
        return UpdateResult(
            source=label, run_id=run_id, outcome="unchanged", message="the check passes as it is"
        )
    lines = [f"run {run_id!r}: the current code differs from the record (recorded -> now):"]
    for seq, name, diff in changes:
        lines.append(f"  seq {seq} model {name}:")
        lines.append(format_diff(list(diff)))
    if output_diff:
        lines.append("  output:")
        lines.append(format_diff(list(output_diff)))
    lines.append(MODELS_KEPT)
    if not write:
        lines.append(f"Write the updated fixture: `redrive check --update --write {label}`")
        return UpdateResult(
            source=label,
            run_id=run_id,
            outcome="changed",
            message="\n".join(lines),
            changes=changes,
            output_diff=output_diff,
        )
    requests = {d.seq: d.replayed for d in drifts if d.seq is not None}
    fresh = MemoryJournal(label)
    _rewrite(rdj, record, fresh, requests, now)
    export_run(fresh, run_id, label)
    lines.append(f"wrote {label}")
    return UpdateResult(
        source=label,
        run_id=run_id,
        outcome="written",
        message="\n".join(lines),
        changes=changes,
        output_diff=output_diff,
    )


def _frames(
    source: Any, run_id: str, requests: dict[int, Any], output: Any
) -> Iterator[tuple[Frame, Any, str]]:
    """The run's frames with their new payloads: ``(frame, payload or None, key)``.

    Model requests are stored as a live recording stores them: each as the
    prefix delta of the previous request of its step name (:class:`Expander`),
    the changed ones with their new arguments and key, so an edit changes the
    requests it changed, not every request after it; the run_end with the new
    output; every other frame's payload is kept as it is (None).
    """
    deltas = Expander()
    for frame, data in expand_frames(source.frames(run_id)):
        if frame.kind == Kind.MODEL_REQUEST.value and isinstance(data, dict):
            key = frame.key
            if frame.seq in requests:
                data = {**data, "args": requests[frame.seq]}
                key = call_key(frame.name, match_view(data["args"]))
            yield frame, deltas.stored(frame.name, data), key
        elif frame.kind == Kind.RUN_END.value and isinstance(data, dict):
            yield frame, {**data, "output": output}, frame.key
        else:
            yield frame, None, frame.key


def _rewrite(
    source: Any, record: RunRecord, dst: MemoryJournal, requests: dict[int, Any], output: Any
) -> None:
    """Write the run into ``dst`` with the new requests and output, chained anew."""
    prev = GENESIS
    frames: list[Frame] = []
    for frame, payload, key in _frames(source, record.run_id, requests, output):
        if payload is None:
            new = attrs.evolve(frame, key=key, epoch=0)
            new = attrs.evolve(new, chain=new.expected_chain(prev))
        else:
            new = make_frame(
                run_id=record.run_id,
                seq=frame.seq,
                kind=frame.kind,
                name=frame.name,
                key=key,
                # the default scrubber, as every written payload passes (no secret journaled)
                payload=DEFAULT.payload(frame.kind, canonical(payload, "payload")),
                prev_chain=prev,
                at=frame.at,
            )
        frames.append(new)
        prev = new.chain
    created = RunRecord(
        run_id=record.run_id,
        input_fp=record.input_fp,
        entrypoint=record.entrypoint,
        created_at=record.created_at,
        updated_at=time.time(),
    )
    dst.create_run(created, frames[0])
    dst.append(
        record.run_id,
        frames[1:],
        expected_seq=1,
        update=RunUpdate(
            status=record.status, output=encode(DEFAULT.value(output), "output"), error=None
        ),
    )
