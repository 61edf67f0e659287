"""redrive.otel: runs as OpenTelemetry GenAI spans, after the fact and live (in-memory exporter)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("opentelemetry.sdk.trace")

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes
from opentelemetry.semconv.attributes import error_attributes
from opentelemetry.trace import StatusCode

import redrive
from redrive import otel
from redrive.cli import main
from redrive.storage import Journal, MemoryJournal
from tests import sample_run
from tests.conftest import Drive, Loop
from tests.sdkserver import ScriptServer, serve

#: every attribute name the OpenTelemetry semantic conventions package publishes for GenAI
PUBLISHED = {
    value
    for name, value in vars(gen_ai_attributes).items()
    if name.startswith("GEN_AI_") and isinstance(value, str)
} | {error_attributes.ERROR_TYPE}


@pytest.fixture
def server() -> Iterator[ScriptServer]:
    with serve() as srv:
        yield srv


@pytest.fixture
def exporter() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    yield provider, memory
    otel.uninstrument()
    provider.shutdown()


def _by_name(spans: Any) -> dict[str, ReadableSpan]:
    return {s.name: s for s in spans}


def _check_shape(spans: list[ReadableSpan], *, replayed: bool) -> None:
    """The sample run's spans: one root, four children (two chats, two parallel tools)."""
    named = _by_name(spans)
    assert sorted(named) == [
        "chat gpt-4o",
        "execute_tool charge",
        "execute_tool lookup",
        "invoke_agent support:42",
    ]
    assert len(spans) == 5  # two chat spans share a name
    root = named["invoke_agent support:42"]
    assert root.parent is None
    assert root.status.status_code is StatusCode.OK
    assert (
        root.attributes is not None and root.attributes["gen_ai.operation.name"] == "invoke_agent"
    )
    assert root.attributes["redrive.run.id"] == "support:42"
    assert root.context is not None
    for span in spans:
        if span is root:
            continue
        assert span.parent is not None and span.parent.span_id == root.context.span_id
        assert span.context is not None and span.context.trace_id == root.context.trace_id
        assert span.attributes is not None
        assert span.attributes["redrive.step.replayed"] is replayed
        for key in span.attributes:
            assert key.startswith("redrive.") or key in PUBLISHED, key
    chats = sorted(
        (s for s in spans if s.name == "chat gpt-4o"),
        key=lambda s: str((s.attributes or {}).get("redrive.step.seq")).zfill(6),
    )
    first, streamed = (dict(s.attributes or {}) for s in chats)
    assert first["gen_ai.operation.name"] == "chat"
    assert first["gen_ai.provider.name"] == "openai"
    assert first["gen_ai.request.model"] == "gpt-4o"
    assert first["gen_ai.response.model"] == "gpt-4o-2024-08-06"
    assert first["gen_ai.response.finish_reasons"] == ("tool_calls",)
    assert (first["gen_ai.usage.input_tokens"], first["gen_ai.usage.output_tokens"]) == (11, 7)
    assert streamed["gen_ai.request.stream"] is True
    assert (streamed["gen_ai.usage.input_tokens"], streamed["gen_ai.usage.output_tokens"]) == (
        20,
        6,
    )
    assert streamed["gen_ai.response.id"] == "chatcmpl-2"
    lookup = named["execute_tool lookup"]
    charge = named["execute_tool charge"]
    assert lookup.attributes is not None and charge.attributes is not None
    assert lookup.attributes["gen_ai.tool.name"] == "lookup"
    assert lookup.attributes["gen_ai.tool.call.id"] == "call_lookup"
    assert charge.attributes["gen_ai.tool.call.id"] == "call_charge"
    assert lookup.status.status_code is StatusCode.UNSET
    assert charge.status.status_code is StatusCode.ERROR
    assert charge.attributes["error.type"] == "tests.sample_run.ChargeDeclined"
    assert charge.attributes["redrive.step.status"] == "error"


def test_export_after_the_fact(server: ScriptServer, exporter: Any) -> None:
    """A recorded run (parallel tools, a stream, an error) exports as GenAI spans with its times."""
    provider, memory = exporter
    journal = redrive.open_journal(":memory:")
    sample_run.record(server, journal)
    otel.export_run(journal, "support:42", provider)
    spans = list(memory.get_finished_spans())
    _check_shape(spans, replayed=False)
    named = _by_name(spans)
    root, lookup = named["invoke_agent support:42"], named["execute_tool lookup"]
    assert root.start_time is not None and root.end_time is not None
    assert lookup.start_time is not None and lookup.end_time is not None
    assert root.start_time <= lookup.start_time <= lookup.end_time <= root.end_time
    assert root.attributes is not None and isinstance(
        root.attributes["redrive.run.fingerprint"], str
    )


def test_live_spans_then_replayed_spans(server: ScriptServer, exporter: Any) -> None:
    """instrument(): spans as the steps finish; the same run replayed says replayed=True."""
    provider, memory = exporter
    journal = redrive.open_journal(":memory:")
    otel.instrument(provider)
    sample_run.record(server, journal)
    _check_shape(list(memory.get_finished_spans()), replayed=False)
    memory.clear()
    sample_run.record(server, journal)  # finished: every step is handed back from the journal
    assert len(server.requests) == 2
    spans = list(memory.get_finished_spans())
    _check_shape(spans, replayed=True)
    root = _by_name(spans)["invoke_agent support:42"]
    assert root.attributes is not None and root.attributes["redrive.run.replayed_steps"] == 4


def test_live_spans_of_a_resumed_run(server: ScriptServer, exporter: Any) -> None:
    """Resumed after a crash: the step before it is replayed, the rest go live, each span says so.

    The resumed execution's model request is stored as a prefix delta of a
    request written by the crashed execution: its span still comes out whole.
    """
    provider, memory = exporter
    journal = redrive.open_journal(":memory:")
    otel.instrument(provider)
    with pytest.raises(asyncio.CancelledError):
        sample_run.record(server, journal, crash_after_first=True)
    crashed = _by_name(memory.get_finished_spans())
    assert crashed["invoke_agent support:42"].status.status_code is StatusCode.ERROR
    memory.clear()
    server.add(sample_run.script_replies()[1])
    _resume(server, journal)
    spans = list(memory.get_finished_spans())
    modes = {
        (s.name, (s.attributes or {}).get("redrive.step.seq")): (s.attributes or {}).get(
            "redrive.step.replayed"
        )
        for s in spans
    }
    assert modes == {  # seq 3 holds the resumed execution's ``resumed`` note
        ("chat gpt-4o", 1): True,
        ("execute_tool lookup", 4): False,
        ("execute_tool charge", 5): False,
        ("chat gpt-4o", 8): False,
        ("invoke_agent support:42", None): None,
    }
    streamed = next(s for s in spans if (s.attributes or {}).get("redrive.step.seq") == 8)
    assert (streamed.attributes or {})["gen_ai.usage.output_tokens"] == 6
    assert (streamed.attributes or {})["gen_ai.request.model"] == "gpt-4o"


def _resume(server: ScriptServer, journal: Journal) -> None:
    """Run the sample agent again under run ``support:42`` (its replies already scripted)."""

    async def main() -> None:
        client = redrive.wrap(
            openai.AsyncOpenAI(api_key="sk-test", base_url=server.url + "/v1", max_retries=0)
        )
        try:
            async with redrive.run(journal, "support:42", input={"order": "A-1"}) as run:
                run.finish(await sample_run.agent(client))
        finally:
            await client.close()

    asyncio.run(main())


def test_replayed_spans_can_be_left_out(server: ScriptServer, exporter: Any) -> None:
    """instrument(replayed_spans=False): a re-driven run emits only its root span, counts on it.

    Outside: pydantic/pydantic-ai#6974 and temporalio/sdk-java#952 (replay
    re-emits every span of the original execution, inflating telemetry).
    """
    provider, memory = exporter
    journal = redrive.open_journal(":memory:")
    sample_run.record(server, journal)
    otel.instrument(provider, replayed_spans=False)
    sample_run.record(server, journal)
    (root,) = memory.get_finished_spans()
    assert root.name == "invoke_agent support:42"
    assert root.attributes is not None
    assert (
        root.attributes["redrive.run.replayed_steps"],
        root.attributes["redrive.run.live_steps"],
    ) == (4, 0)


def test_parallel_tool_spans_are_siblings_under_the_callers_span(
    server: ScriptServer, exporter: Any
) -> None:
    """The run's span is a child of the caller's active span; concurrent tools are siblings.

    Outside: DataDog/dd-trace-py#18415 and JetBrains/koog#2236 (parallel tool
    spans chained under each other instead of sharing their step's parent).
    """
    provider, memory = exporter
    otel.instrument(provider)
    journal = redrive.open_journal(":memory:")
    with provider.get_tracer("app").start_as_current_span("job 42") as job:
        sample_run.record(server, journal)
    spans = _by_name(memory.get_finished_spans())
    root = spans["invoke_agent support:42"]
    assert root.parent is not None and root.parent.span_id == job.get_span_context().span_id
    assert root.context is not None
    for name in ("execute_tool lookup", "execute_tool charge"):
        tool = spans[name]
        assert tool.parent is not None and tool.parent.span_id == root.context.span_id
    lookup, charge = spans["execute_tool lookup"], spans["execute_tool charge"]
    assert lookup.start_time is not None and charge.end_time is not None
    assert charge.start_time is not None and lookup.end_time is not None
    assert lookup.start_time < charge.end_time and charge.start_time < lookup.end_time  # overlap


def test_live_root_span_records_a_failed_run(exporter: Any) -> None:
    """A run whose body raises ends its root span with ERROR and the exception's type."""
    provider, memory = exporter
    otel.instrument(provider)
    journal = redrive.open_journal(":memory:")
    with pytest.raises(KeyError), redrive.run(journal, "broken"):
        raise KeyError("boom")
    (root,) = memory.get_finished_spans()
    assert root.status.status_code is StatusCode.ERROR
    assert root.attributes is not None and root.attributes["error.type"] == "KeyError"


def test_cli_export_otlp_json(server: ScriptServer, tmp_path: Path) -> None:
    """`redrive export RUN --otlp-json FILE` writes OTLP/JSON: hex ids, one trace, parents."""
    db = str(tmp_path / "runs.duckdb")
    journal = redrive.open_journal(db)
    sample_run.record(server, journal)
    journal.close()
    target = tmp_path / "trace.json"
    assert main(["--journal", db, "export", "support:42", "--otlp-json", str(target)]) == 0
    document = json.loads(target.read_text())
    (resource,) = document["resourceSpans"]
    (scope,) = resource["scopeSpans"]
    spans = scope["spans"]
    assert len(spans) == 5
    assert len({s["traceId"] for s in spans}) == 1
    root = next(s for s in spans if "parentSpanId" not in s)
    assert root["name"] == "invoke_agent support:42" and root["status"]["code"] == 1
    assert all(s["parentSpanId"] == root["spanId"] for s in spans if s is not root)
    charge = next(s for s in spans if s["name"] == "execute_tool charge")
    assert charge["status"]["code"] == 2
    assert {"key": "gen_ai.tool.call.id", "value": {"stringValue": "call_charge"}} in charge[
        "attributes"
    ]
    assert int(root["endTimeUnixNano"]) >= int(root["startTimeUnixNano"])
    again = tmp_path / "again.json"
    assert main(["--journal", db, "export", "support:42", "--otlp-json", str(again)]) == 0
    assert again.read_text() == target.read_text()  # ids derived from the run: the same file


SECRETS = st.sampled_from(
    [
        "sk-proj-" + "a1" * 12,
        "sk-ant-api03-" + "b2" * 12,
        "ghp_" + "c3" * 18,
        "AKIAABCDEFGHIJKLMNOP",
    ]
)


@given(
    secret=SECRETS,
    where=st.sampled_from(["model", "provider", "tool", "error"]),
    pad=st.text(max_size=8),
)
def test_no_attribute_carries_a_secret(secret: str, where: str, pad: str) -> None:
    """Whatever field of a step a secret-looking string sits in, no span attribute holds it."""
    text = f"{pad} {secret} {pad}"
    view: dict[str, Any] = {"model": "m", "provider": "p"}
    if where in ("model", "provider"):
        view[where] = text
    if where == "error":
        view["error"] = {"type": text}
    _, attrs, _ = otel.model_attributes("x", {"view": view}, None)
    _, tool_attrs, _ = otel.tool_attributes(
        text if where == "tool" else "t", text, "tool_error", {"error": {"type": text}}
    )
    for value in [*otel._clean(attrs).values(), *otel._clean(tool_attrs).values()]:
        assert secret not in repr(value)


@given(secret=SECRETS, param=st.sampled_from(["key", "api_key", "access_token", "sig"]))
def test_a_secret_in_a_step_name_or_url_stays_out_of_span_names(secret: str, param: str) -> None:
    """A step named after a URL with a credential query parameter: masked in names and attributes.

    Outside: decocms/studio#5628 (a Google API key sent as ``?key=`` exported in
    every span's ``url.full``) and nais/unleasherator#748 (a token in a URL path).
    """
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    journal = redrive.open_journal(":memory:")
    endpoint = f"/v1beta/models/gemini:generateContent?{param}={secret}"

    def call(**request: Any) -> dict[str, Any]:
        return {"ok": True}

    model = redrive.model(name=f"gemini:POST {endpoint}")(call)
    with redrive.run(journal, f"r {secret}") as run:
        model(endpoint=endpoint)
        run.finish("ok")
    otel.export_run(journal, f"r {secret}", provider)
    spans = memory.get_finished_spans()
    assert len(spans) == 2
    for span in spans:
        assert secret not in span.name
        assert secret not in repr(dict(span.attributes or {}))


def test_step_observer_errors_never_reach_the_run(exporter: Any) -> None:
    """An observer that raises is logged and dropped: the run ends as it would have."""

    def broken(event: str, info: dict[str, Any]) -> None:
        raise RuntimeError("observer bug")

    redrive.replay.set_step_observer(broken)
    try:
        journal: Journal = redrive.open_journal(":memory:")
        with redrive.run(journal, "fine") as run:
            run.finish(redrive.now())
        assert journal.get_run("fine") is not None
        assert journal.get_run("fine").status == "succeeded"  # type: ignore[union-attr]
    finally:
        redrive.replay.set_step_observer(None)


_WITHOUT_OTEL = """
import importlib.abc, sys

class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "opentelemetry":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Blocker())
from redrive.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_without_the_otel_extra(tmp_path: Path) -> None:
    """No OpenTelemetry SDK: `export --otlp-json` says what to install (exit 2); `view` works."""
    rdj = next((Path(__file__).resolve().parents[2] / "fixtures" / "runs" / "pass").glob("*.rdj"))
    run = [sys.executable, "-c", _WITHOUT_OTEL, "--journal", str(rdj)]
    done = subprocess.run(
        [*run, "export", "x", "--otlp-json", str(tmp_path / "t.json")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "pip install 'redrive[otel]'" in lines[0], done.stderr
    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT_OTEL, "view", str(rdj), "-o", str(tmp_path / "v.html")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "v.html").read_text().startswith("<!doctype html>")


def test_anthropic_stream_attributes() -> None:
    """An Anthropic Messages stream: response id and model from message_start, stop reason from
    message_delta, usage from the semantic view."""
    events = [
        'event: message_start\ndata: {"type": "message_start", "message": {"id": "msg_1", '
        '"type": "message", "model": "claude-sonnet-4-5-20250929", "stop_reason": null}}\n\n',
        'event: message_delta\ndata: {"type": "message_delta", "delta": {"stop_reason": '
        '"end_turn"}, "usage": {"output_tokens": 9}}\n\n',
    ]
    request = {"view": {"provider": "anthropic", "model": "claude-sonnet-4-5", "stream": True}}
    outcome = {
        "response": {"status": 200, "stream": True, "chunks": events},
        "view": {"usage": {"input_tokens": 12, "output_tokens": 9}},
    }
    name, attrs, error = otel.model_attributes("anthropic:POST /v1/messages", request, outcome)
    assert (name, error) == ("chat claude-sonnet-4-5", None)
    assert attrs["gen_ai.response.id"] == "msg_1"
    assert attrs["gen_ai.response.model"] == "claude-sonnet-4-5-20250929"
    assert attrs["gen_ai.response.finish_reasons"] == ["end_turn"]
    assert (attrs["gen_ai.usage.input_tokens"], attrs["gen_ai.usage.output_tokens"]) == (12, 9)
    assert attrs["gen_ai.provider.name"] == "anthropic"


@pytest.mark.parametrize("replayed_spans", [True, False])
def test_a_tool_in_flight_at_the_crash_gets_its_live_span_on_resume(
    drive: Drive, exporter: Any, replayed_spans: bool
) -> None:
    """Outside tester (own case after openai-agents-python#4254): a restart-safe tool in
    flight at the crash really runs again on resume; its live ``execute_tool`` span comes out
    (attempt 2), with or without replayed spans, as ``export --otlp-json`` shows it. The
    resumed execution's span reader starts from the frames written before the crash."""
    provider, memory = exporter
    journal = MemoryJournal()

    @drive.model
    def plan(text: str) -> str:
        return "ship"

    @drive.tool(restart_safe=True)
    def ship(item: str) -> str:
        return f"shipped {item}"

    def loop(run: redrive.Run) -> Loop:
        yield plan("go")
        return run.finish((yield ship("A")))

    drive.crash(journal, "r", "tool_claimed", "ship", loop)
    otel.instrument(provider, replayed_spans=replayed_spans)
    try:
        assert drive.run(journal, "r", loop).value == "shipped A"
    finally:
        otel.uninstrument()
    tools = [s for s in memory.get_finished_spans() if s.name == "execute_tool ship"]
    assert len(tools) == 1
    attrs = tools[0].attributes or {}
    assert attrs["redrive.step.replayed"] is False and attrs["redrive.step.attempts"] == 2
    chats = [s for s in memory.get_finished_spans() if s.name.startswith("chat")]
    assert len(chats) == (1 if replayed_spans else 0)
