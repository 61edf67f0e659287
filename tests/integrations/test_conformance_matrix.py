"""The conformance matrix: every cell is a real crash at a boundary and a resume.

Cells (tests/integrations/matrix_cells.py) of one framework family run in a
chain of child processes (tests/integrations/matrix_child.py): process k
resumes cell k-1 (then replays it offline) and runs cell k until it is
killed, so N cells cost N+1 processes; the families' chains run side by side.
The processes of a chain are real ones forked from a warm parent that has imported
the family's framework (tests/crash/warm.py; a cold import of the Agents SDK or
LiteLLM costs seconds of CPU per process): each child knows of its cells only what is
on disk, is SIGKILLed for real, and writes its pid where the killing server reads it.
Each cell then gets a verdict from what is outside the processes: the side
effects in its log, the requests its scripted server received, the run's
status and output in its journal. Every cell runs by default (CI's run);
``REDRIVE_MATRIX=quick`` runs the cells marked quick, which cover every row
and each framework's every boundary. docs/conformance.md is the table the
cells declare, and a test keeps it equal to :func:`render`.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

import redrive
from tests.crash.warm import WarmParent
from tests.integrations.conftest import FRAMEWORKS
from tests.integrations.fakeapi import HoldingServer, _HoldingHandler
from tests.integrations.matrix_cells import (
    SERVER_FAULTS,
    SERVER_KILLS,
    VERDICTS,
    Scenario,
    cells,
    render,
    uncovered,
)
from tests.sdkserver import Received, Reply

pytestmark = pytest.mark.crash

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
#: which cells run: ``full`` (every one, the default) or ``quick`` (docs/testing.md)
CELLS = cells(os.environ.get("REDRIVE_MATRIX", "full"))


@attrs.define
class KillAt(Reply):
    """A script entry that SIGKILLs the child whose pid is in ``pidfile`` instead of answering."""

    pidfile: str = ""


class _KillingHandler(_HoldingHandler):
    def _serve(self) -> None:
        server = self.server
        assert isinstance(server, HoldingServer)
        with server.lock:
            head = server.script[0] if server.script else None
            if isinstance(head, KillAt):
                server.script.pop(0)
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else b""
                headers = {k.lower(): v for k, v in self.headers.items()}
                server.requests.append(Received(self.command, self.path, headers, body))
        if not isinstance(head, KillAt):
            super()._serve()
            return
        os.kill(int(Path(head.pidfile).read_text()), signal.SIGKILL)
        self.close_connection = True


class KillingServer(HoldingServer):
    """A :class:`HoldingServer` whose :class:`KillAt` entries kill the child in flight."""

    def __init__(self) -> None:
        super().__init__()
        self.RequestHandlerClass = _KillingHandler


@attrs.define
class Cell:
    """One cell's world: its server, files and what the children said about it."""

    scenario: Scenario
    boundary: str
    dir: Path
    server: KillingServer
    lines: list[dict[str, Any]] = attrs.Factory(list)

    @property
    def id(self) -> str:
        return f"{self.scenario.name}@{self.boundary}"

    def job(self, mode: str, kill: str | None) -> dict[str, Any]:
        return {
            "cell": self.id,
            "scenario": self.scenario.name,
            "run_id": f"cell:{self.id}",
            "journal": str(self.dir / "runs.duckdb"),
            "effects": str(self.dir / "effects.log"),
            "workdir": str(self.dir),
            "base_url": self.server.url + "/v1",
            "mode": mode,
            "kill": kill,
        }


def _script(cell: Cell, pidfile: Path) -> list[Reply]:
    turns = cell.scenario.script()
    at = SERVER_KILLS.get(cell.boundary)
    if at is not None:
        turns.insert(at, KillAt(pidfile=str(pidfile)))
    if cell.boundary in SERVER_FAULTS:
        where, status = SERVER_FAULTS[cell.boundary]
        turns.insert(where, Reply(status=status, body=_fault(status)))
    return turns


def _fault(status: int) -> dict[str, Any]:
    """A provider's transient error body (the shape both the OpenAI and Anthropic APIs use)."""
    kind = "rate_limit_error" if status == 429 else "overloaded_error"
    return {"type": "error", "error": {"type": kind, "message": f"{status}: try again later"}}


#: what a chain's warm parent imports besides its family's framework
WARM = [
    "redrive",
    "duckdb",
    "tests.integrations.matrix_drivers",
    "tests.integrations.matrix_bare",
    "tests.integrations.matrix_more",
    "tests.integrations.matrix_signed",
]


def _warm_modules(family: str) -> list[str]:
    module = FRAMEWORKS.get(family, (family, ""))[0]
    extra = ["langchain_openai"] if family == "langchain" else []
    return [*WARM, module, *extra]


def _chain(family: list[Cell], work: Path) -> None:
    """Run a family's cells: process k resumes and replays cell k-1, then dies in cell k."""
    warm = WarmParent(_warm_modules(family[0].scenario.family), env=ENV)
    try:
        _chain_in(warm, family, work)
    finally:
        warm.close()


def _chain_in(warm: WarmParent, family: list[Cell], work: Path) -> None:
    previous: Cell | None = None
    for index in range(len(family) + 1):
        jobs: list[dict[str, Any]] = []
        if previous is not None:
            jobs += [previous.job("live", None), previous.job("offline", None)]
        current = family[index] if index < len(family) else None
        if current is not None:
            jobs.append(current.job("live", current.boundary))
        pidfile = work / f"pid-{index}"
        if current is not None:
            current.server.add(*_script(current, pidfile))
        jobs_file = work / f"jobs-{index}.json"
        jobs_file.write_text(json.dumps(jobs))
        child = warm.run(
            "tests.integrations.matrix_child:main",
            [str(jobs_file)],
            env=ENV,
            cwd=work,
            files=work / f"process-{index}",
            pidfile=pidfile,
            timeout=600,
        )
        by_id = {c.id: c for c in family}
        for line in child.stdout.splitlines():
            if line.startswith("{"):
                data = json.loads(line)
                by_id[data["cell"]].lines.append({**data, "rc": child.returncode})
        if current is not None:
            current.lines.append(
                {"cell": current.id, "killed": child.returncode, "stderr": child.stderr[-3000:]}
            )
        previous = current


def _installed(scenario: Scenario) -> bool:
    import importlib.util

    module = FRAMEWORKS.get(scenario.family, (scenario.family, ""))[0]
    return importlib.util.find_spec(module) is not None


@pytest.fixture(scope="module")
def matrix(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Cell]]:
    """Run every collected cell (the families' chains side by side); yield them by id."""
    root = tmp_path_factory.mktemp("matrix")
    wanted = {
        item.callspec.id
        for item in request.session.items
        if item.module is sys.modules[__name__] and hasattr(item, "callspec")
    }
    found: dict[str, Cell] = {}
    families: dict[str, list[Cell]] = {}
    servers: list[Any] = []
    try:
        for scenario, boundary in CELLS:
            if not _installed(scenario) or f"{scenario.name}@{boundary}" not in wanted:
                continue
            server = KillingServer()
            thread = threading.Thread(
                target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
            )
            thread.start()
            servers.append((server, thread))
            where = root / f"{scenario.name}-{boundary}"
            where.mkdir()
            cell = Cell(scenario, boundary, where, server)
            found[cell.id] = cell
            families.setdefault(scenario.family, []).append(cell)
        chains = [
            threading.Thread(target=_chain, args=(cells_, root / f"chain-{name}"))
            for name, cells_ in families.items()
        ]
        for name in families:
            (root / f"chain-{name}").mkdir()
        for chain in chains:
            chain.start()
        for chain in chains:
            chain.join()
        yield found
    finally:
        for server, thread in servers:
            server.released.set()
            server.shutdown()
            server.server_close()
            thread.join()


def verdict(cell: Cell) -> str:
    """What the resume of ``cell`` did, from what is outside the processes."""
    killed = next((line for line in cell.lines if "killed" in line), None)
    if killed is None or killed["killed"] != -signal.SIGKILL:
        return f"not killed at the boundary: {killed}"
    answers = [line for line in cell.lines if "killed" not in line]
    if len(answers) != 2 or any("error" in line for line in answers):
        return f"stuck: {[line.get('error') for line in answers]}"
    live, offline = answers[0]["output"], answers[1]["output"]
    if live != offline:
        return f"offline replay differs: {live} != {offline}"
    wrong = {k: live.get(k) for k, v in cell.scenario.expect.items() if live.get(k) != v}
    if wrong:
        return f"framework state wrong after the resume: {wrong} (expected {cell.scenario.expect})"
    log = cell.dir / "effects.log"
    sent = log.read_text().splitlines() if log.exists() else []
    if len(sent) > cell.scenario.effects:
        return f"duplicate side effect: {sent}"
    journal = redrive.open_journal(str(cell.dir / "runs.duckdb"))
    try:
        run_id = f"cell:{cell.id}"
        paid = sum(1 for f in journal.frames(run_id) if f.kind == "model_response")
        record = journal.get_run(run_id)
    finally:
        journal.close()
    cut = 1 if cell.boundary in SERVER_KILLS or cell.boundary in SERVER_FAULTS else 0
    if len(cell.server.requests) > paid + cut:
        return f"duplicate model call: {len(cell.server.requests)} requests for {paid} steps"
    if record is None or record.status != "succeeded" or len(sent) != cell.scenario.effects:
        return f"stuck: status {record and record.status}, side effects {sent}"
    return VERDICTS[cell.boundary]


@pytest.mark.parametrize(("scenario", "boundary"), CELLS, ids=[f"{s.name}@{b}" for s, b in CELLS])
def test_cell(scenario: Scenario, boundary: str, matrix: dict[str, Cell]) -> None:
    """The cell's verdict is the one the table (docs/conformance.md) declares."""
    if not _installed(scenario):
        if os.environ.get("CI") == "true":
            pytest.fail(f"{scenario.family} is not installed (the dev extra installs it)")
        pytest.skip(f"{scenario.family} is not installed")
    cell = matrix[f"{scenario.name}@{boundary}"]
    found = verdict(cell)
    assert found == VERDICTS[boundary], (found, cell.lines)


def test_the_documented_table_is_the_generated_one() -> None:
    """docs/conformance.md is what the cells declare (regenerate: see matrix_cells)."""
    assert (ROOT / "docs" / "conformance.md").read_text() == render(), (
        "docs/conformance.md is out of date: "
        "python -m tests.integrations.matrix_cells > docs/conformance.md"
    )


def test_no_cell_declares_a_duplicate_or_a_stuck_run() -> None:
    """Every verdict in the table says the resume held (none names a duplicate or a stuck run)."""
    assert not any(word in render().lower() for word in ("duplicate ", "stuck"))


def test_the_quick_cells_cover_every_row_and_each_frameworks_boundaries() -> None:
    """``REDRIVE_MATRIX=quick`` kills each row once at least, each framework at each boundary."""
    assert uncovered(cells("quick")) == []
    assert len(cells("quick")) < len(cells("full"))


def test_a_gap_in_the_chosen_cells_is_named() -> None:
    """Leaving out a row's only cell, or a framework's only cell at a boundary, is reported."""
    quick = cells("quick")
    lone = next(c for c in quick if sum(1 for d in quick if d[0] is c[0]) == 1)
    gaps = uncovered([c for c in quick if c != lone])
    assert f"row {lone[0].framework} | {lone[0].feature} | {lone[0].face}" in gaps
    error_1 = [c for c in quick if c[1] == "error_1" and c[0].framework == "litellm"]
    assert uncovered([c for c in quick if c not in error_1]) == ["boundary error_1 of litellm"]


def test_an_unknown_matrix_size_is_refused() -> None:
    """A misspelt ``REDRIVE_MATRIX`` fails loudly instead of running some other set."""
    with pytest.raises(ValueError, match="REDRIVE_MATRIX='ful'"):
        cells("ful")
