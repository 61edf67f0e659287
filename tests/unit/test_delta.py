"""Model requests are stored as prefix deltas, so a journal grows linearly (issue 7 item 3)."""

from __future__ import annotations

from typing import Any

import pytest

import redrive
from redrive.frames import PrefixRef, decode, encode
from redrive.replay._delta import compress, expand, expand_frames
from redrive.storage import MemoryJournal


def conversation_loop(turns: int) -> Any:
    @redrive.model
    def chat(messages: list[dict[str, str]], model: str = "m") -> str:
        return f"reply {len(messages)} " + "x" * 500

    def loop() -> list[str]:
        messages = [{"role": "system", "content": "s" * 500}]
        replies = []
        for i in range(turns):
            messages.append({"role": "user", "content": f"question {i} " + "q" * 500})
            reply = chat(messages)
            messages.append({"role": "assistant", "content": reply})
            replies.append(reply)
        return replies

    return loop


def journal_bytes(turns: int) -> int:
    journal = MemoryJournal()
    loop = conversation_loop(turns)
    with redrive.run(journal, "c") as run:
        run.finish(loop())
    return sum(len(f.payload) for f in journal.frames("c"))


def test_bytes_per_step_do_not_grow_with_the_conversation() -> None:
    """Bytes per step at 100 turns stay within 1.5x of those at 10 turns (not 10x)."""
    small, large = journal_bytes(10) / 10, journal_bytes(100) / 100
    assert large < small * 1.5


def test_replay_and_resume_see_full_requests() -> None:
    """Replay matches the full requests, and a resumed run continues the delta chain."""
    journal = MemoryJournal()
    loop = conversation_loop(6)
    with redrive.run(journal, "d") as run:
        out = run.finish(loop())
    with redrive.run(journal, "d") as again:
        assert loop() == out
    assert again.replayed_steps == 6
    requests = [data for f, data in expand_frames(journal.frames("d")) if f.kind == "model_request"]
    assert [len(r["args"]["messages"]) for r in requests] == [2, 4, 6, 8, 10, 12]
    raw = [f.data() for f in journal.frames("d") if f.kind == "model_request"]
    assert isinstance(raw[3]["args"]["messages"], PrefixRef)


def test_resume_mid_conversation_records_consistent_deltas() -> None:
    """Deltas written after a resume resolve against the recorded history."""
    journal = MemoryJournal()
    short = conversation_loop(3)
    with pytest.raises(ConnectionError), redrive.run(journal, "e"):
        short()
        raise ConnectionError("worker died")
    full = conversation_loop(5)
    with redrive.run(journal, "e") as run:
        run.finish(full())
    assert run.replayed_steps == 3 and run.live_steps == 2
    with redrive.run(journal, "e") as again:
        full()
    assert again.replayed_steps == 5


def test_compress_expand_roundtrip() -> None:
    """expand(previous, compress(previous, current)) == current, through the encoding."""
    prev = {"body": {"messages": [1, 2, 3], "model": "m"}}
    cur = {"body": {"messages": [1, 2, 3, 4], "model": "m"}}
    packed = decode(encode(compress(prev, cur)))
    assert packed["body"]["messages"] == PrefixRef(3, [4])
    assert expand(prev, packed) == cur
    with pytest.raises(ValueError):
        expand({"body": {"messages": [1]}}, packed)
