"""The recorders reach the run through one seam, and never through a private replay module."""

from __future__ import annotations

import ast
from pathlib import Path

import redrive

RECORDERS = Path(redrive.__file__).parent / "recorders"
#: The run's recorder interface; only the seam module (``_step.py``) calls it.
RUN_CALLS = {
    "abegin_model",
    "abegin_tool",
    "before_next_step",
    "begin_model",
    "begin_tool",
    "begin_value",
    "redact",
    "redacting",
}
#: Recorders of tools, values and model callables: they call the run's step methods directly.
OTHER_RECORDERS = {"model.py", "tools.py", "values.py"}


def _modules() -> list[Path]:
    return sorted(RECORDERS.glob("*.py"))


def test_no_recorder_imports_a_private_replay_module() -> None:
    """``from ..replay._cursor import ...`` and the like are reach-ins: use ``redrive.replay``."""
    bad = []
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                parts = node.module.split(".")
                if "replay" in parts and any(p.startswith("_") for p in parts):
                    bad.append(f"{path.name}: from {'.' * node.level}{node.module}")
    assert bad == []


def test_only_the_seam_calls_the_run_recorder_interface() -> None:
    """The HTTP recorders and the cassette importer call the run only through ``_step.py``."""
    bad = []
    for path in _modules():
        if path.name == "_step.py" or path.name in OTHER_RECORDERS:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in RUN_CALLS:
                bad.append(f"{path.name}:{node.lineno} .{node.attr}")
    assert bad == []


def test_the_http_module_keeps_its_public_names() -> None:
    """``redrive.recorders.http`` still exports what it did before the split."""
    from redrive.recorders import http

    for name in http.__all__:
        assert hasattr(http, name), name
    assert {"RecordingTransport", "AsyncRecordingTransport", "HttpRecorder"} <= set(http.__all__)
    assert {"describe_request", "response_payload", "scrub_headers", "split_events"} <= set(
        http.__all__
    )


def test_the_seam_opens_model_steps_through_the_runs_typed_handles() -> None:
    """``_step.py`` uses ``run.begin_model`` / ``await run.abegin_model``, not the tuple form."""
    tree = ast.parse((RECORDERS / "_step.py").read_text())
    called = {
        node.func.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
    }
    awaited = {
        node.value.func.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Await)
        and isinstance(node.value, ast.Call)
        and isinstance(node.value.func, ast.Attribute)
    }
    assert {"begin_model", "abegin_model", "record", "arecord"} <= called
    assert {"abegin_model", "arecord"} <= awaited
    assert not {"model_begin", "model_record"} & called


def test_the_run_has_no_tuple_form_of_a_model_step() -> None:
    """The tuple protocol (``model_begin`` / ``model_record``) is gone: recorders use handles."""
    assert not hasattr(redrive.Run, "model_begin") and not hasattr(redrive.Run, "model_record")
