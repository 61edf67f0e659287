"""A stream the loop closes while it handles the end of an iteration is the loop's choice.

Found in CI (tests/integrations/test_signed_peer_reports.py, litellm's streamed
case, about 1 run in 8): litellm's stream wrapper reads Anthropic's events until
it has the message, then closes the response inside its ``except
StopAsyncIteration`` handler, sometimes before the final ``message_stop`` event
arrived. redrive took the close as made while an exception unwound (a crash)
and journaled nothing, so the live call the loop acted on was missing from the
finished run: its replay raised ``ReplayMissError``. A close made while
``StopIteration`` / ``StopAsyncIteration`` is handled now journals what the loop
read (``partial``), as any early close does; a close during a real exception
still journals nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

import redrive
from redrive.storage import Journal
from tests.unit.test_sdk_openai import MESSAGES, STREAM, _Chunked


class _Wrapper:
    """A stream wrapper in litellm's manner: it stops after ``stop`` chunks and closes the
    response in its handler of the iteration's end."""

    def __init__(self, stream: Any, stop: int) -> None:
        self.stream, self.inner, self.stop, self.seen = stream, iter(stream), stop, 0

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        try:
            if self.seen == self.stop:
                raise StopIteration
            self.seen += 1
            return next(self.inner)
        except StopIteration:
            self.stream.close()
            raise


class _AsyncWrapper:
    def __init__(self, stream: Any, stop: int) -> None:
        self.stream, self.inner, self.stop, self.seen = stream, aiter(stream), stop, 0

    def __aiter__(self) -> AsyncIterator[Any]:
        return self

    async def __anext__(self) -> Any:
        try:
            if self.seen == self.stop:
                raise StopAsyncIteration
            self.seen += 1
            return await anext(self.inner)
        except StopAsyncIteration:
            await self.stream.close()
            raise


def _deliver(face: str, journal: Journal, endpoint: _Chunked, stop: int) -> list[Any]:
    if face == "sync":
        client = endpoint.sync()
        with redrive.run(journal, "s:1") as run:
            stream = client.chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True)
            seen = [c.model_dump() for c in _Wrapper(stream, stop)]
            return run.finish(seen)  # type: ignore[no-any-return]

    async def go() -> list[Any]:
        client = endpoint.async_()
        try:
            async with redrive.run(journal, "s:1") as run:
                stream = await client.chat.completions.create(
                    model="gpt-4o", messages=MESSAGES, stream=True
                )
                seen = [c.model_dump() async for c in _AsyncWrapper(stream, stop)]
                return run.finish(seen)  # type: ignore[no-any-return]
        finally:
            await client.close()

    return asyncio.run(go())


@pytest.mark.parametrize("face", ["sync", "async"])
@pytest.mark.parametrize("stop", range(1, len(STREAM)))
def test_a_close_in_the_handler_of_an_iteration_end_journals_what_was_read(
    face: str, stop: int
) -> None:
    journal = redrive.open_journal(":memory:")
    endpoint = _Chunked()
    live = _deliver(face, journal, endpoint, stop)
    assert len(live) == stop
    # the finished run replays: the same chunks, no request
    assert _deliver(face, journal, endpoint, stop) == live
    assert endpoint.requests == 1
    stored = next(f for f in journal.frames("s:1") if f.kind == "model_response").data()
    assert stored["response"]["chunks"] == STREAM[:stop]
    journal.close()


@pytest.mark.parametrize("face", ["sync", "async"])
def test_a_close_while_a_real_error_unwinds_still_journals_nothing(face: str) -> None:
    journal = redrive.open_journal(":memory:")
    endpoint = _Chunked()

    class Boom(Exception):
        pass

    async def agen(stream: Any) -> None:
        async for _ in stream:
            try:
                raise Boom
            except Boom:
                await stream.close()
                raise

    with pytest.raises(Boom):
        if face == "sync":
            client = endpoint.sync()
            with redrive.run(journal, "e:1"):
                stream = client.chat.completions.create(
                    model="gpt-4o", messages=MESSAGES, stream=True
                )
                for _ in stream:
                    try:
                        raise Boom
                    except Boom:
                        stream.close()
                        raise
        else:

            async def go() -> None:
                client = endpoint.async_()
                try:
                    async with redrive.run(journal, "e:1"):
                        stream = await client.chat.completions.create(
                            model="gpt-4o", messages=MESSAGES, stream=True
                        )
                        await agen(stream)
                finally:
                    await client.close()

            asyncio.run(go())
    assert not [f for f in journal.frames("e:1") if f.kind == "model_response"]
    journal.close()
