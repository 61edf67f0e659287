"""One RecordingTransport serves sync and async httpx clients: both faces, the same exchange."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx2
import pytest

import redrive
from redrive.recorders.http import AsyncRecordingTransport, HttpRecorder, RecordingTransport
from redrive.storage import Journal

BASE = "http://model.test/v1"
SSE = [b'data: {"n": 1}\n\n', b'data: {"n": 2}\n\n', b"data: [DONE]\n\n"]
FACES = ["sync", "async"]


def _events(face: str) -> Iterator[bytes] | AsyncIterator[bytes]:
    async def agen() -> AsyncIterator[bytes]:
        for event in SSE:
            yield event

    return agen() if face == "async" else iter(SSE)


def _transport(face: str, sent: list[str]) -> RecordingTransport:
    """A recording transport around a mock server that answers JSON, SSE, or refuses."""

    def handler(request: httpx2.Request) -> httpx2.Response:
        sent.append(request.url.path)
        if request.url.path.endswith("/refused"):
            raise httpx2.ConnectError("refused", request=request)
        if request.url.path.endswith("/sse"):
            headers = {"content-type": "text/event-stream"}
            return httpx2.Response(200, headers=headers, content=_events(face))
        return httpx2.Response(200, json={"ok": True, "path": request.url.path})

    recorder = HttpRecorder(provider="test", base_path="/v1")
    return RecordingTransport(httpx2.MockTransport(handler), recorder)


async def _aexchange(transport: Any, path: str, take: int | None) -> list[bytes]:
    out: list[bytes] = []
    async with (
        httpx2.AsyncClient(transport=transport, base_url=BASE) as client,
        client.stream("POST", path, json={"q": path}) as response,
    ):
        async for chunk in response.aiter_bytes():
            out.append(chunk)
            if len(out) == take:
                break
    return out


def exchange(face: str, transport: Any, path: str, take: int | None = None) -> list[bytes]:
    """POST ``path`` through ``transport`` on one face; return the chunks read (``take`` first).

    The reader holds its iterator until the response is closed (as the SDKs'
    streams do): a stream closed early is then partial, not torn down.
    """
    if face == "async":
        return asyncio.run(_aexchange(transport, path, take))
    with (
        httpx2.Client(transport=transport, base_url=BASE) as client,
        client.stream("POST", path, json={"q": path}) as response,
    ):
        chunks = response.iter_bytes()
        out = list(itertools.islice(chunks, take))
    return out


def _responses(journal: Journal, run_id: str) -> list[Any]:
    return [f.data()["response"] for f in journal.frames(run_id) if f.kind == "model_response"]


@pytest.fixture
def journal() -> Journal:
    return redrive.open_journal(":memory:")


def test_the_async_name_is_the_same_class() -> None:
    """AsyncRecordingTransport is RecordingTransport: one class, both httpx interfaces."""
    assert AsyncRecordingTransport is RecordingTransport
    assert callable(RecordingTransport.handle_request)
    assert callable(RecordingTransport.handle_async_request)


@pytest.mark.parametrize("record_face", FACES)
@pytest.mark.parametrize("replay_face", FACES)
@pytest.mark.parametrize("path", ["/chat", "/sse"])
def test_either_face_replays_what_either_face_recorded(
    journal: Journal, record_face: str, replay_face: str, path: str
) -> None:
    """A JSON or SSE exchange recorded on one face replays on the other, byte for byte, offline."""
    sent: list[str] = []
    with redrive.run(journal, "r"):
        live = exchange(record_face, _transport(record_face, sent), path)
    with redrive.run(journal, "r", live=False):
        replayed = exchange(replay_face, _transport(replay_face, sent), path)
    assert b"".join(replayed) == b"".join(live)
    if path == "/sse":
        assert replayed == SSE  # one event a chunk, in order
    assert sent == ["/v1" + path]


@pytest.mark.parametrize("path", ["/chat", "/sse"])
def test_both_faces_journal_the_same_payload(journal: Journal, path: str) -> None:
    """The stored response does not depend on the face that recorded it."""
    for face in FACES:
        with redrive.run(journal, face):
            exchange(face, _transport(face, []), path)
    assert _responses(journal, "sync") == _responses(journal, "async")
    assert len(_responses(journal, "sync")) == 1


@pytest.mark.parametrize("record_face", FACES)
@pytest.mark.parametrize("replay_face", FACES)
def test_partial_stream_replays_to_the_same_point_on_either_face(
    journal: Journal, record_face: str, replay_face: str
) -> None:
    """A stream closed after one event is partial; either face replays it; reading on diverges."""
    with redrive.run(journal, "r"):
        assert exchange(record_face, _transport(record_face, []), "/sse", take=1) == SSE[:1]
    [response] = _responses(journal, "r")
    assert response["partial"] is True
    assert response["chunks"] == [SSE[0].decode()]
    with redrive.run(journal, "r", live=False):
        assert exchange(replay_face, _transport(replay_face, []), "/sse", take=1) == SSE[:1]
    with (
        pytest.raises(redrive.DivergenceError, match="closed by the loop after 1 event") as info,
        redrive.run(journal, "r", live=False),
    ):
        exchange(replay_face, _transport(replay_face, []), "/sse")
    assert info.value.reason is redrive.DivergenceReason.STREAM_OVERRUN


@pytest.mark.parametrize("face", FACES)
def test_transport_error_is_marked_retryable_and_not_journaled(journal: Journal, face: str) -> None:
    """A refused connection raises on either face with retryable=True; nothing is journaled."""
    with pytest.raises(httpx2.ConnectError) as info, redrive.run(journal, "r"):
        exchange(face, _transport(face, []), "/refused")
    assert getattr(info.value, "retryable", None) is True
    assert _responses(journal, "r") == []
    assert journal.get_run("r").status == "paused"  # resumable


@pytest.mark.parametrize("face", FACES)
def test_outside_a_run_either_face_passes_through(face: str) -> None:
    """Outside a run the transport sends every request, on either face, recording nothing."""
    sent: list[str] = []
    transport = _transport(face, sent)
    assert b"".join(exchange(face, transport, "/sse")) == b"".join(SSE)
    assert exchange(face, transport, "/chat")
    assert sent == ["/v1/sse", "/v1/chat"]


@pytest.mark.parametrize("face", FACES)
@pytest.mark.parametrize("path", ["/chat", "/sse"])
def test_each_face_uses_its_own_form_of_the_step_seam(
    journal: Journal, monkeypatch: pytest.MonkeyPatch, face: str, path: str
) -> None:
    """The async face opens and journals through abegin_model/arecord; the sync face does not."""
    from redrive.recorders import _recorder, _step

    used: list[str] = []

    def spy(name: str, fn: Any) -> Any:
        if asyncio.iscoroutinefunction(fn):

            async def afn(*args: Any, **kwargs: Any) -> Any:
                used.append(name)
                return await fn(*args, **kwargs)

            return afn
        return lambda *args, **kwargs: used.append(name) or fn(*args, **kwargs)

    monkeypatch.setattr(_recorder, "begin_model", spy("begin", _step.begin_model))
    monkeypatch.setattr(_recorder, "abegin_model", spy("abegin", _step.abegin_model))
    monkeypatch.setattr(_step.ModelStep, "record", spy("record", _step.ModelStep.record))
    monkeypatch.setattr(_step.ModelStep, "arecord", spy("arecord", _step.ModelStep.arecord))
    with redrive.run(journal, "r"):
        exchange(face, _transport(face, []), path)
    if face == "async":  # (today arecord itself goes on to the sync record)
        assert used[:2] == ["abegin", "arecord"]
    else:
        assert used == ["begin", "record"]
    assert len(_responses(journal, "r")) == 1
