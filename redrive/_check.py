"""CI replay checks: re-drive saved runs against the current code, replay-only and strict.

A run started through ``@redrive.durable`` records its entrypoint
(``"module:qualname"``) and input in its ``run_start`` frame. A check imports
that function, calls it with the recorded input inside
``Run(live=False, replay="strict")`` over a private in-memory copy of the run,
and compares the outcome with the record:

* a step that differs from the record: ``diverged`` (the DivergenceError report);
* a step that nobody recorded (the code would go live): ``went_live``;
* the loop ends early, leaving recorded steps unused: ``diverged``;
* another output (or another error for a failed run): ``output_changed``;
* anything else (no entrypoint, import error, a damaged file): ``error``.

Three levels, as Temporal's replayer: :func:`check_run` (one run ->
:class:`CheckResult`), :func:`check_runs` (many -> :class:`CheckReport`,
collect-all or fail-fast), :func:`iter_checks` (an iterator).
"""

from __future__ import annotations

import os
import pickle
import shlex
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

import attrs

from ._check_jobs import run_checks
from ._entry import call_args as _call_args
from ._entry import drive as _drive
from ._entry import import_paths as _import_paths
from ._entry import private_copy as _copy
from ._entry import resolve as _resolve
from ._scrub import mask_text
from .errors import DivergenceError, ReplayError, ReplayMissError
from .frames import Kind, canonical
from .replay import REASKED, Run, diff_values, format_diff
from .storage import Journal, MemoryJournal, RunStatus

__all__ = [
    "CheckFailedError",
    "CheckReport",
    "CheckResult",
    "check_run",
    "check_runs",
    "collect_sources",
    "iter_checks",
    "write_junit",
]

Outcome = Literal["passed", "diverged", "went_live", "output_changed", "error"]
Source = str | os.PathLike[str] | tuple[Journal, str]


@attrs.frozen(kw_only=True)
class CheckResult:
    """The outcome of re-driving one saved run.

    Attributes:
        source: the ``.rdj`` path, or ``"<journal url>#<run_id>"``.
        run_id: the run's id (None when the file could not be read).
        outcome: ``passed``, ``diverged``, ``went_live``, ``output_changed`` or ``error``.
        message: the report (the divergence diff, the miss with closest steps...).
        seq: the recorded seq where the check failed, when known.
        replayed_steps: steps answered from the record before the outcome.
        reasked: seqs of recorded model steps the run re-asked live when it
            resumed across a code change (``on_drift="continue_live"``); empty
            for a run that did not (see :func:`redrive.run_fingerprint`).
        duration: seconds the check took.
        error: the exception behind a failed check, if any.
    """

    source: str
    run_id: str | None
    outcome: Outcome
    message: str = ""
    seq: int | None = None
    replayed_steps: int = 0
    reasked: tuple[int, ...] = ()
    duration: float = attrs.field(default=0.0, eq=False)
    error: BaseException | None = attrs.field(default=None, eq=False, repr=False)

    @property
    def passed(self) -> bool:
        """True when the run replayed exactly as recorded."""
        return self.outcome == "passed"


@attrs.frozen
class CheckReport:
    """The results of :func:`check_runs`, in the order checked."""

    results: tuple[CheckResult, ...]

    @property
    def passed(self) -> list[CheckResult]:
        """The results that passed."""
        return [r for r in self.results if r.passed]

    @property
    def failed(self) -> list[CheckResult]:
        """The results that did not pass."""
        return [r for r in self.results if not r.passed]

    @property
    def ok(self) -> bool:
        """True when every checked run passed (and at least one was checked)."""
        return bool(self.results) and not self.failed

    def summary(self) -> str:
        """One line: ``3 runs checked: 2 passed, 1 failed``."""
        return (
            f"{len(self.results)} run(s) checked: {len(self.passed)} passed, "
            f"{len(self.failed)} failed"
        )


class CheckFailedError(ReplayError, AssertionError):
    """``check_runs(..., raise_on_failure=True)`` found failing runs.

    Fields: ``report`` (the :class:`CheckReport`).
    """


def collect_sources(paths: Iterable[str | os.PathLike[str]]) -> list[str]:
    """Expand ``paths``: files as given, directories to their ``*.rdj`` files (sorted, recursive).

    Raises:
        FileNotFoundError: a path that does not exist.
        ValueError: a journal database given where an exported ``.rdj`` run belongs.

    A directory gives its ``*.rdj`` files and their text forms (``*.rdj.jsonl``).
    """
    out: list[str] = []
    for path in paths:
        p = Path(path)
        if p.is_dir():
            found = [*p.rglob("*.rdj"), *p.rglob("*.rdj.jsonl")]  # binary and text forms
            out.extend(str(f) for f in sorted(found))
        elif p.exists():
            if p.suffix in (".duckdb", ".db"):
                raise ValueError(
                    f"{p} is a journal database; redrive check replays exported runs: "
                    f"`redrive --journal {p} export RUN -o RUN.rdj`, then check the .rdj file"
                )
            out.append(str(p))
        else:
            raise FileNotFoundError(f"no such file or directory: {p}")
    return out


def open_run_file(path: str) -> tuple[Journal, str]:
    """Open a saved run: an ``.rdj`` file, or its text form (``.jsonl``, loaded in memory).

    Returns:
        ``(journal, run_id)``.

    Raises:
        JournalCorruptError, JournalFormatError, OSError: the file cannot be read.
    """
    from .storage.rdj import RdjJournal, import_text, is_text_path

    if is_text_path(path):
        text = MemoryJournal(path)
        return text, import_text(path, text).run_id
    rdj = RdjJournal(path)
    return rdj, rdj.run_id


def _update_hint(source: Source) -> str:
    """For an ``.rdj`` fixture, the command that shows (and can write) it updated to the code."""
    if isinstance(source, tuple):
        return ""
    return (
        "\nIf the change is intended, see the fixture updated to the current code (recorded "
        f"model responses kept): `redrive check --update {shlex.quote(os.fspath(source))}`"
    )


def check_run(
    source: Source,
    *,
    import_paths: Sequence[str] = (),
) -> CheckResult:
    """Re-drive one saved run against the current code, replay-only and strict.

    Args:
        source: an ``.rdj`` path, or ``(journal, run_id)``.
        import_paths: directories put at the front of ``sys.path`` while the
            entrypoint is imported and run (e.g. the repository root).

    Returns:
        A :class:`CheckResult`; a failing run is a result, not an exception.
        Only ``KeyboardInterrupt``/``SystemExit`` propagate.
    """
    started = time.perf_counter()
    if isinstance(source, tuple):
        journal, run_id = source
        label = f"{journal.url}#{run_id}"
    else:
        label = os.fspath(source)
        run_id = None

    reasked: tuple[int, ...] = ()
    copy: Journal | None = None

    def result(outcome: Outcome, message: str = "", **more: Any) -> CheckResult:
        if outcome in ("diverged", "went_live", "output_changed") and copy is not None:
            # next to a divergence: what the fingerprint says changed since it was recorded
            from ._whatchanged import describe_changes

            changed = describe_changes(copy, run_id or "")
            if changed:
                message = f"{message}\n{changed}"
        if reasked:
            message = (
                (f"{message}\n" if message else "")
                + "resumed across a code change: model step(s) re-asked live at seq "
                + ", ".join(map(str, reasked))
            )
        return CheckResult(
            source=label,
            run_id=run_id,
            outcome=outcome,
            message=message,
            duration=time.perf_counter() - started,
            reasked=reasked,
            **more,
        )

    try:
        if not isinstance(source, tuple):
            journal, run_id = open_run_file(label)
        assert run_id is not None
        copy = _copy(journal, run_id)
        record = copy.get_run(run_id)
        assert record is not None
        first = next(copy.frames(run_id))
        start = first.data() if first.kind == Kind.RUN_START.value else {}
        entry = start.get("entrypoint") or record.entrypoint
        reasked = tuple(
            ref
            for f in copy.frames(run_id)
            if f.kind == Kind.NOTE.value and f.name == REASKED
            for ref in [f.data().get("step")]
            if isinstance(ref, int)
        )
    except (ReplayError, OSError, ValueError) as exc:
        return result("error", f"cannot read the run: {exc}", error=exc)
    if not entry:
        return result(
            "error",
            f"run {run_id!r} has no recorded entrypoint; only runs started through "
            "@redrive.durable can be re-driven by a check",
        )
    if record.status not in (RunStatus.SUCCEEDED.value, RunStatus.FAILED.value):
        return result(
            "error",
            f"run {run_id!r} is {record.status}: only finished runs (succeeded or failed) can "
            "be checked; finish or re-record it",
        )
    with _import_paths(list(import_paths)):
        try:
            func = _resolve(entry)
            args, kwargs = _call_args(func, start.get("input"))
        except Exception as exc:
            hint = (
                "; run the check from the project's root directory or add it with "
                "`redrive check -I DIR` (check_runs(import_paths=...))"
                if isinstance(exc, ImportError | AttributeError)
                else ""
            )
            return result(
                "error",
                f"cannot load entrypoint {entry!r} of run {run_id!r}: "
                f"{type(exc).__name__}: {exc}{hint}",
                error=exc,
            )
        run = Run(copy, run_id, live=False, replay="strict", entrypoint=entry)
        try:
            output = _drive(run, func, args, kwargs)
        except DivergenceError as exc:
            return result(
                "diverged",
                str(exc) + _update_hint(source),
                seq=exc.seq,
                error=exc,
                replayed_steps=run.replayed_steps,
            )
        except ReplayMissError as exc:
            return result(
                "went_live",
                str(exc) + _update_hint(source),
                seq=exc.seq,
                error=exc,
                replayed_steps=run.replayed_steps,
            )
        except Exception as exc:
            text = f"{type(exc).__name__}: {exc}"
            if record.status == RunStatus.FAILED.value and text == record.error:
                return result("passed", "failed as recorded", replayed_steps=run.replayed_steps)
            return result(
                "error" if record.status == RunStatus.SUCCEEDED.value else "output_changed",
                f"run {run_id!r}: the entrypoint raised {text}"
                + (
                    f" where the record failed with {record.error}"
                    if record.error
                    else " where the record succeeded"
                ),
                error=exc,
                replayed_steps=run.replayed_steps,
            )
    if record.status == RunStatus.FAILED.value:
        return result(
            "output_changed",
            f"run {run_id!r}: the record failed with {record.error}, the current code succeeded",
            replayed_steps=run.replayed_steps,
        )
    try:
        now = canonical(output, "output")
    except TypeError as exc:
        return result("output_changed", f"run {run_id!r}: output cannot be encoded: {exc}")
    recorded = record.output_value()
    diff = diff_values(recorded, now, "$.output")
    if diff:
        return result(
            "output_changed",
            f"run {run_id!r}: every step replayed, but the output differs (recorded -> now):\n"
            + format_diff(diff)
            + _update_hint(source),
            replayed_steps=run.replayed_steps,
        )
    return result("passed", replayed_steps=run.replayed_steps)


def _check_in_worker(source: str, import_paths: Sequence[str]) -> CheckResult:
    """:func:`check_run` in a worker process; the result must travel back pickled."""
    res = check_run(source, import_paths=import_paths)
    if res.error is not None:
        try:
            pickle.dumps(res.error)
        except Exception:  # an exception that cannot travel: keep its text
            res = attrs.evolve(res, error=RuntimeError(f"{type(res.error).__name__}: {res.error}"))
    return res


def iter_checks(
    sources: Sequence[Source] | Iterator[Source],
    *,
    fail_fast: bool = False,
    import_paths: Sequence[str] = (),
    jobs: int = 1,
    chosen: Callable[[int], None] | None = None,
) -> Iterator[CheckResult]:
    """Yield a :class:`CheckResult` per source (``.rdj`` paths are used as given).

    With ``fail_fast`` the iteration stops after the first failing result.
    ``jobs`` > 1 checks ``.rdj`` paths in that many worker processes, in the
    order of ``sources``; ``0`` measures the first runs here and starts workers
    only where they pay (:mod:`._check_jobs`). ``(journal, run_id)`` sources are
    checked here, in order. ``chosen`` is told how many processes check the
    runs (1: this one), as :func:`~._check_jobs.run_checks` says.
    """
    return run_checks(
        sources,
        check=lambda source: check_run(source, import_paths=import_paths),
        worker=_check_in_worker,
        fail_fast=fail_fast,
        import_paths=import_paths,
        jobs=jobs,
        chosen=chosen,
    )


def check_runs(
    sources: Iterable[Source],
    *,
    fail_fast: bool = False,
    raise_on_failure: bool = False,
    import_paths: Sequence[str] = (),
    progress: Callable[[CheckResult], None] | None = None,
    jobs: int = 1,
) -> CheckReport:
    """Check many saved runs; collect every failure, or stop at the first.

    Args:
        sources: ``.rdj`` paths or directories (expanded to their ``*.rdj``
            files), or ``(journal, run_id)`` pairs.
        fail_fast: stop after the first failing run.
        raise_on_failure: raise :class:`CheckFailedError` instead of returning
            a report with failures.
        import_paths: as :func:`check_run`.
        progress: called with each result as it is made.
        jobs: worker processes for ``.rdj`` paths (``0``: one per CPU core, when
            measured to pay: see :mod:`._check_jobs`; default 1, in this process).

    Returns:
        A :class:`CheckReport`.

    Raises:
        CheckFailedError: ``raise_on_failure`` and a run failed.
        FileNotFoundError: a path that does not exist.
    """
    expanded: list[Source] = []
    for source in sources:
        if isinstance(source, tuple):
            expanded.append(source)
        else:
            expanded.extend(collect_sources([source]))
    results = []
    for res in iter_checks(expanded, fail_fast=fail_fast, import_paths=import_paths, jobs=jobs):
        results.append(res)
        if progress is not None:
            progress(res)
    report = CheckReport(tuple(results))
    if raise_on_failure and report.failed:
        first = report.failed[0]
        raise CheckFailedError(
            f"{report.summary()}; first failure: {first.source} ({first.outcome})\n{first.message}",
            run_id=first.run_id,
            seq=first.seq,
            report=report,
        )
    return report


def write_junit(report: CheckReport, path: str | os.PathLike[str]) -> None:
    """Write ``report`` as JUnit XML (one ``testcase`` per run) for CI systems.

    Failure texts pass the default secret masking (``sk-`` keys, bearer tokens,
    secret query parameters), as everything redrive writes does.

    Raises:
        OSError: the file cannot be written.
    """
    suite = ET.Element(
        "testsuite",
        name="redrive check",
        tests=str(len(report.results)),
        failures=str(sum(r.outcome != "error" for r in report.failed)),
        errors=str(sum(r.outcome == "error" for r in report.failed)),
        time=f"{sum(r.duration for r in report.results):.3f}",
    )
    for res in report.results:
        case = ET.SubElement(
            suite,
            "testcase",
            classname="redrive.check",
            name=res.run_id or res.source,
            file=res.source,
            time=f"{res.duration:.3f}",
        )
        if not res.passed:
            tag = "error" if res.outcome == "error" else "failure"
            # a failure's text can quote the live call's arguments (a divergence diff), which
            # the journal's scrubber never saw: CI keeps this file, so it is masked too
            message = mask_text(res.message)
            first_line = message.splitlines()[0] if message else res.outcome
            node = ET.SubElement(case, tag, type=res.outcome, message=first_line)
            node.text = message
    root = ET.Element("testsuites")
    root.append(suite)
    tree = ET.ElementTree(root)
    ET.indent(tree)
    tree.write(os.fspath(path), encoding="utf-8", xml_declaration=True)
