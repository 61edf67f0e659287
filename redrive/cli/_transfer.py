"""Moving runs in and out of a journal and checking them.

``redrive export``, ``import``, ``verify`` and ``import-cassette``.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from .._runid import check_run_id
from ..errors import JournalCorruptError, JournalFormatError, JournalWriteError
from ._common import EXIT_DATA, EXIT_FAILED, EXIT_OK, EXIT_USAGE, CliError, Subparsers, one_line
from ._journals import close_opened, is_rdj_file, opened, source
from ._output import Out, run_row, shown
from ._shares import add_allow_secrets, refuse_secrets

__all__ = ["register"]


def _export(args: argparse.Namespace, out: Out) -> int:
    from ..storage.rdj import export_run

    if args.otlp_json is not None or args.output is None:
        return _export_otlp(args, out)
    journal = opened(args.journal)
    refuse_secrets(journal, args.run, "export", allowed=args.allow_secrets)
    if args.intact:
        from ._damaged import export_intact

        saved, lost = export_intact(journal, args.run, args.output)
        if out.json:
            out.emit(
                {
                    "run_id": args.run,
                    "path": args.output,
                    "frames": saved.next_seq,
                    "left_out": lost,
                }
            )
        else:
            out.line(
                f"exported the {saved.next_seq} intact frames of run {shown(args.run)} to "
                f"{shown(args.output)} ({lost} frames after them left out), as an unfinished run"
            )
        return EXIT_OK
    record = journal.get_run(args.run)
    total = record.next_seq if record is not None else 0
    with out.progress(f"exporting {args.run}", total) as update:
        record = export_run(journal, args.run, args.output, progress=update)
    data = {
        "run_id": record.run_id,
        "path": args.output,
        "frames": record.next_seq,
        "bytes": os.path.getsize(args.output),
        "status": record.status,
    }
    if out.json:
        out.emit(data)
    else:
        out.line(
            f"exported run {shown(record.run_id)} ({record.next_seq} frames, {data['bytes']} "
            f"bytes) to {shown(args.output)}"
        )
    return EXIT_OK


def _export_otlp(args: argparse.Namespace, out: Out) -> int:
    """``export RUN --otlp-json FILE``: the run as OpenTelemetry GenAI spans (``redrive.otel``)."""
    if args.otlp_json is None:
        raise CliError(
            "UsageError", "export needs -o FILE.rdj, --otlp-json FILE.json, or both", EXIT_USAGE
        )
    refuse_secrets(opened(args.journal), args.run, "export", allowed=args.allow_secrets)
    if args.output is not None:
        args_rdj = argparse.Namespace(**{**vars(args), "otlp_json": None})
        _export(args_rdj, Out(False) if out.json else out)
    try:
        from ..otel import write_otlp_json

        spans = write_otlp_json(opened(args.journal), args.run, args.otlp_json)
    except ImportError as exc:
        raise CliError("ImportError", str(exc), EXIT_USAGE) from None
    if out.json:
        out.emit({"run_id": args.run, "path": args.otlp_json, "spans": spans})
    else:
        out.line(
            f"exported run {shown(args.run)} as {spans} OpenTelemetry span(s) "
            f"to {shown(args.otlp_json)}"
        )
    return EXIT_OK


def _import(args: argparse.Namespace, out: Out) -> int:
    from .._runcheck import import_run
    from ..storage.rdj import is_text_path, read_header

    if not os.path.exists(args.file):
        raise FileNotFoundError(f"no such file: {args.file}")
    total = 0 if is_text_path(args.file) else read_header(args.file).frames
    journal = opened(args.journal, must_exist=False)
    try:
        with out.progress(f"importing {args.file}", total) as update:
            record = import_run(args.file, journal, progress=update)
    except ValueError as exc:  # the file's run id breaks the run-id rule
        if "run id" not in str(exc):
            raise
        raise CliError("ValueError", one_line(str(exc)), EXIT_DATA) from None
    if out.json:
        out.emit({"journal": args.journal, "run": run_row(record)})
    else:
        out.line(
            f"imported run {shown(record.run_id)} ({record.next_seq} frames, {record.status}) "
            f"into {shown(args.journal)}"
        )
    return EXIT_OK


def _verify_one(target: str, url: str, out: Out) -> dict[str, Any]:
    """Check one ``.rdj`` file or run; return ``{"target", "run_id", "frames", "ok"}``.

    Raises:
        JournalCorruptError: the file or run fails a check of :func:`redrive._runcheck.check_run`
            (what every read of it checks).
    """
    from .._runcheck import check_run

    item: dict[str, Any] = {"target": target}
    if is_rdj_file(target):
        from ..storage.rdj import RdjJournal

        rj = RdjJournal(target, verify=False)
        item["run_id"] = rj.run_id
        with out.progress(f"verifying {target}", rj.header.frames) as update:
            frames = rj.frames(rj.run_id)
            item["frames"] = check_run(rj.header.run, frames, source=target, progress=update)
        return item
    journal, run_id = source(target, url)
    record = journal.get_run(run_id)
    assert record is not None  # source() checked it
    item["run_id"] = run_id
    item["frames"] = check_run(record, journal.frames(run_id), source=journal.url)
    return item


def _corrupt(target: str, exc: JournalCorruptError | JournalFormatError) -> dict[str, Any]:
    """The verdict of a target that failed its checks (or could not be read at all)."""
    return {
        "target": target,
        "ok": False,
        "reason": exc.fields.get("reason"),
        "message": str(exc),
        "last_good_seq": exc.fields.get("last_good_seq"),
    }


def _verify(args: argparse.Namespace, out: Out) -> int:
    results: list[dict[str, Any]] = []
    targets = list(args.targets)
    if not targets:
        try:
            targets = [r.run_id for r in opened(args.journal).runs()]
        except (JournalCorruptError, JournalFormatError) as exc:  # the journal itself: a verdict
            results.append(_corrupt(args.journal, exc))
    for target in targets:
        try:
            item = _verify_one(target, args.journal, out)
            item["ok"] = True
        except (JournalCorruptError, JournalFormatError) as exc:
            item = _corrupt(target, exc)
        results.append(item)
    try:
        close_opened()  # closing checkpoints the log: its failure is part of the verdict
    except (JournalCorruptError, JournalWriteError) as exc:
        item = {"target": args.journal, "ok": False, "message": str(exc)}
        item["reason"] = exc.fields.get("reason", "close")
        results.append(item)
    ok = all(r["ok"] for r in results)
    if out.json:
        out.emit({"ok": ok, "results": results})
    else:
        if not results:
            out.line(f"ok       {shown(args.journal)}: no runs to check", "green")
        for r in results:
            if r["ok"]:
                out.line(
                    f"ok       {shown(r['target'])}: {r['frames']} frames, chain intact", "green"
                )
            else:
                out.line(f"CORRUPT  {shown(r['target'])}: {r['message']}", "red")
    return EXIT_OK if ok else EXIT_FAILED


def _skipped(journal: Any, run_id: str) -> list[dict[str, Any]]:
    """Return the data of the run's skipped-interaction notes, in order."""
    from ..frames import Kind, decode
    from ..recorders.cassettes import SKIPPED_NOTE

    return [
        decode(frame.payload)["data"]
        for frame in journal.frames(run_id)
        if frame.kind == Kind.NOTE and frame.name == SKIPPED_NOTE
    ]


def _import_cassette(args: argparse.Namespace, out: Out) -> int:
    """``redrive import-cassette``: a bad cassette exits 65, a usage error or missing PyYAML 2.

    The cassette is read and checked completely before the journal is opened, so
    nothing about the cassette (not even running out of memory) is reported as
    the journal's, and a refused cassette creates no journal file.
    """
    if not os.path.exists(args.file):
        raise FileNotFoundError(f"no such file: {args.file}")
    from ..recorders import cassettes

    if args.run_id is not None:
        try:
            check_run_id(args.run_id, where="--run-id")
        except ValueError as exc:
            raise CliError("UsageError", str(exc), EXIT_USAGE) from None
    try:
        prepared = cassettes.prepare_cassette(args.file, provider=args.provider)
        journal = opened(args.journal, must_exist=False)
        run_id = cassettes.import_cassette(prepared, journal, run_id=args.run_id)
    except cassettes.CassetteError as exc:
        code = EXIT_USAGE if "already exists" in str(exc) else EXIT_DATA
        raise CliError("CassetteError", one_line(str(exc)), code) from None
    except MemoryError:
        raise CliError(
            "CassetteError",
            f"{args.file}: reading this cassette ran out of memory (the journal was not "
            "touched); it is too large for this machine, or hostile: check it, or import it "
            "with tighter limits (redrive.recorders.cassettes.CassetteLimits)",
            EXIT_DATA,
        ) from None
    except ImportError:
        raise CliError(
            "ImportError",
            "import-cassette needs PyYAML to read a YAML cassette: "
            "pip install 'redrive[cassettes]' (or pip install pyyaml); "
            "a JSON cassette needs nothing more",
            EXIT_USAGE,
        ) from None
    skipped = _skipped(journal, run_id)
    if out.json:
        out.emit({"journal": args.journal, "runs": [run_id], "skipped": skipped})
    else:
        out.line(f"imported {shown(args.file)} into {shown(args.journal)} as run {shown(run_id)}")
        for item in skipped:
            out.line(
                f"skipped interaction {item['index']} ({shown(item['request'])}): "
                f"{shown(item['reason'])}"
            )
    return EXIT_OK


def register(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    """Add ``export``, ``import``, ``verify`` and ``import-cassette`` to the subcommands."""
    p = sub.add_parser(
        "export",
        parents=[common],
        help="write a run to an .rdj file (or JSON Lines, or OpenTelemetry spans)",
        usage="redrive export RUN (-o FILE.rdj | --otlp-json FILE.json) [options]",
        description="Write run RUN for someone else to read: an .rdj file (-o FILE.rdj), its "
        "JSON Lines text form (-o FILE.rdj.jsonl), OpenTelemetry spans (--otlp-json), or both; "
        "one of -o and --otlp-json is required. Before writing, the run is scanned with the "
        "journal writer's secret detector: a credential field or secret-looking text makes the "
        "command refuse (exit 65), naming the run, seq and path, unless --allow-secrets.",
    )
    p.add_argument("run", metavar="RUN", help="the run id in --journal")
    p.add_argument(
        "-o",
        "--output",
        metavar="FILE.rdj",
        help="the file to write (required unless --otlp-json): .rdj, or .jsonl for the "
        "JSON Lines text form",
    )
    p.add_argument(
        "--intact",
        action="store_true",
        help="a damaged run: export its frames up to the first that fails a check",
    )
    p.add_argument(
        "--otlp-json",
        metavar="FILE.json",
        help="write the run as OpenTelemetry GenAI spans in OTLP/JSON (needs redrive[otel])",
    )
    add_allow_secrets(p)
    p.set_defaults(func=_export)

    p = sub.add_parser(
        "import",
        parents=[common],
        help="copy an .rdj file's run into --journal",
        description="Copy the run of FILE (an .rdj file, or its .rdj.jsonl text form) into "
        "--journal, checked frame by frame and all or nothing, keeping the run's own times. "
        "Exit 65 when the file's run id breaks the run-id rule.",
    )
    p.add_argument("file", metavar="FILE.rdj", help="the .rdj (or .rdj.jsonl) file to import")
    p.set_defaults(func=_import)

    p = sub.add_parser(
        "verify",
        parents=[common],
        help="check chain integrity",
        description="Check every frame's seq and chain (and each file's header) of the runs "
        "given, or of every run in --journal. Exit 0 when all pass, 1 when one fails.",
    )
    p.add_argument(
        "targets",
        nargs="*",
        metavar="FILE|RUN",
        help=".rdj files or run ids (default: every run in --journal)",
    )
    p.set_defaults(func=_verify)

    p = sub.add_parser(
        "import-cassette",
        parents=[common],
        help="import a vcrpy YAML/JSON cassette of model traffic as a run",
        description="Turn the model calls of a vcrpy cassette into one finished run in "
        "--journal (secrets scrubbed as a recording scrubs them); interactions that are no "
        "model call are listed as skipped. Exit 65 for a malformed or hostile cassette.",
    )
    p.add_argument("file", metavar="FILE.yaml|FILE.json", help="the cassette to import")
    p.add_argument("--run-id", help="the new run's id (default: derived from the file name)")
    p.add_argument(
        "--provider",
        choices=("openai", "anthropic"),
        help="the API the cassette's hosts speak (default: each request path's shape says; "
        "api.openai.com and api.anthropic.com are always known)",
    )
    p.set_defaults(func=_import_cassette)
