"""The command line with only the required dependencies: no psycopg, PyYAML, SDKs or test tools."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from redrive import cli

ROOT = Path(__file__).resolve().parents[2]
RUNS = ROOT / "fixtures" / "runs"

#: Runs the CLI in a fresh interpreter where the optional packages cannot be imported.
_BLOCKED = textwrap.dedent("""
    import importlib.abc, sys

    BLOCKED = {"psycopg", "psycopg_pool", "yaml", "openai", "anthropic", "httpx",
               "pytest", "hypothesis"}

    class Blocker(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, Blocker())
    from redrive.cli import main
    code = main(sys.argv[1:])
    loaded = sorted(m for m in BLOCKED if m in sys.modules)
    assert not loaded, loaded
    sys.exit(code)
""")


def _cli(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _BLOCKED, *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_postgres_journal_without_psycopg_is_one_line(tmp_path: Path) -> None:
    """A Postgres URL without the postgres extra says what to install, in one line, exit 2."""
    done = _cli("--journal", "postgresql://127.0.0.1:5432/postgres", "runs", cwd=tmp_path)
    assert done.returncode == cli.EXIT_USAGE, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert lines[0].startswith("redrive runs: ImportError: the Postgres journal needs psycopg")
    assert "pip install 'redrive[postgres]'" in lines[0]
    done = _cli("--json", "--journal", "postgres://127.0.0.1/postgres", "runs", cwd=tmp_path)
    assert done.returncode == cli.EXIT_USAGE
    assert json.loads(done.stdout)["error"] == "ImportError"


def test_import_cassette_without_pyyaml_is_one_line(tmp_path: Path) -> None:
    """import-cassette without PyYAML names the package to install, in one line, exit 2."""
    cassette = tmp_path / "c.yaml"
    cassette.write_text("interactions: []\n")
    done = _cli(
        "--journal", str(tmp_path / "c.duckdb"), "import-cassette", str(cassette), cwd=tmp_path
    )
    assert done.returncode == cli.EXIT_USAGE, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "pip install pyyaml" in lines[0], done.stderr


@pytest.mark.parametrize(
    "argv",
    [
        ["--journal", "{rdj}", "runs"],
        ["show", "{rdj}"],
        ["--journal", "{rdj}", "export", "refund:A-100:refunded", "-o", "{tmp}/out.rdj"],
        ["verify", "{rdj}"],
        ["diff", "{rdj}", "{rdj}"],
        ["--journal", "{rdj}", "sql", "SELECT count(*) AS n FROM frames"],
        ["--journal", "{tmp}/new.duckdb", "import", "{rdj}"],
        ["check", "{pass}"],
    ],
    ids=["runs", "show", "export", "verify", "diff", "sql", "import", "check"],
)
def test_commands_work_without_extras(tmp_path: Path, argv: list[str]) -> None:
    """Reading, moving and checking runs needs only duckdb and rich (and attrs, msgpack, xxhash)."""
    names = {
        "rdj": str(RUNS / "pass" / "refunded.rdj"),
        "tmp": str(tmp_path),
        "pass": str(RUNS / "pass"),
    }
    done = _cli("--json", *(a.format(**names) for a in argv), cwd=ROOT)
    assert done.returncode == cli.EXIT_OK, done.stdout + done.stderr
    json.loads(done.stdout)


def test_demo_without_openai_names_the_extra(tmp_path: Path) -> None:
    """``redrive demo`` without the openai extra says what to install (text and JSON), exit 2."""
    done = _cli("demo", cwd=tmp_path)
    assert done.returncode == cli.EXIT_USAGE, done.stderr
    assert "pip install 'redrive[openai]'" in done.stderr, done.stderr
    done = _cli("demo", "--json", cwd=tmp_path)
    assert done.returncode == cli.EXIT_USAGE
    assert "redrive[openai]" in json.loads(done.stdout)["error"]


def test_import_json_cassette_without_pyyaml(tmp_path: Path) -> None:
    """A JSON cassette imports without PyYAML; a YAML one names the cassettes extra."""
    interaction = {
        "request": {
            "method": "POST",
            "uri": "http://localhost:11434/v1/chat/completions",
            "body": {"string": '{"model": "llama3"}'},
            "headers": {},
        },
        "response": {
            "status": {"code": 200, "message": "OK"},
            "headers": {"Content-Type": ["application/json"]},
            "body": {"string": '{"id": "chatcmpl-1"}'},
        },
    }
    cassette = tmp_path / "c.json"
    cassette.write_text(json.dumps({"interactions": [interaction], "version": 1}))
    journal = str(tmp_path / "c.duckdb")
    done = _cli("--json", "--journal", journal, "import-cassette", str(cassette), cwd=tmp_path)
    assert done.returncode == cli.EXIT_OK, done.stdout + done.stderr
    assert json.loads(done.stdout)["runs"] == ["cassette:c"]
    yaml_cassette = tmp_path / "c.yaml"
    yaml_cassette.write_text("interactions: []\n")
    done = _cli("--journal", journal, "import-cassette", str(yaml_cassette), cwd=tmp_path)
    assert done.returncode == cli.EXIT_USAGE, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "pip install 'redrive[cassettes]'" in lines[0], done.stderr
