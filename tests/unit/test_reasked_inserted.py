"""continue_live: a model step the new code inserted where no model record of its turn is
left is asked live, and its ``reasked`` note is one the journal takes (both faces).

Before the fix the note carried ``step: None`` (no recorded step superseded); the frame
check types ``step`` as a seq wherever it appears (docs/reference/format.md), so the
write of the note with the live step's frames failed with ``JournalWriteError`` after
the model was asked and paid, and the response was lost.
"""

from __future__ import annotations

import asyncio
import contextvars
import gc
from typing import Any

import pytest

import redrive
from redrive.replay import REASKED, ReplayPolicy, set_boundary_hook
from redrive.storage import MemoryJournal

CONTINUE = ReplayPolicy(on_drift="continue_live")


class _Cut(Exception):
    """A stop the run is told is resumable (the lookup cut in flight)."""


def _drive(face: str, journal: Any, asked: list[str], prompts: list[str], **options: Any) -> Any:
    """One attempt: ``chat`` for each prompt (one: from the loop; more: in parallel), then a
    lookup."""
    if face == "sync":

        @redrive.model(name="chat")
        def chat(prompt: str) -> str:
            asked.append(prompt)
            return f"{prompt}!"

        @redrive.tool(name="lookup", read_only=True)
        def lookup(order: str) -> str:
            return f"order {order}"

        def main() -> Any:
            with redrive.run(journal, "r", retryable=(_Cut,), **options) as run:
                if len(prompts) == 1:
                    answers = [chat(prompts[0])]
                else:
                    with redrive.executor(max_workers=2) as pool:
                        answers = [f.result() for f in [pool.submit(chat, p) for p in prompts]]
                answers.append(lookup("a"))
                return run.finish(answers)

        return contextvars.copy_context().run(main)

    @redrive.model(name="chat")
    async def achat(prompt: str) -> str:
        await asyncio.sleep(0)
        asked.append(prompt)
        return f"{prompt}!"

    @redrive.tool(name="lookup", read_only=True)
    async def alookup(order: str) -> str:
        await asyncio.sleep(0)
        return f"order {order}"

    async def amain() -> Any:
        async with redrive.run(journal, "r", retryable=(_Cut,), **options) as run:
            if len(prompts) == 1:
                answers = [await achat(prompts[0])]
            else:
                answers = list(await asyncio.gather(*(achat(p) for p in prompts)))
            answers.append(await alookup("a"))
            return run.finish(answers)

    return asyncio.run(amain())


@pytest.mark.parametrize("face", ["sync", "async"])
def test_an_inserted_model_step_under_continue_live_is_journaled(face: str) -> None:
    """[chat p, lookup a] cut in flight at the lookup; the new code asks chat q and chat r
    in parallel: one re-asks chat p's record (superseded, ``step`` 1), the other is
    inserted (no model record of the turn left): its note has no ``step``, the run
    finishes, each model call is made once and journaled."""
    journal = MemoryJournal()
    asked: list[str] = []

    def cut(boundary: str, info: dict[str, Any]) -> None:
        if boundary == "tool_claimed" and info["name"] == "lookup":
            raise _Cut("cut in flight")

    set_boundary_hook(cut)
    try:
        with pytest.raises(_Cut):
            _drive(face, journal, asked, ["p"])
    finally:
        set_boundary_hook(None)
    gc.collect()
    assert journal.get_run("r").status == "paused"
    asked.clear()
    output = _drive(face, journal, asked, ["q", "r"], replay=CONTINUE)
    assert output == ["q!", "r!", "order a"]
    assert sorted(asked) == ["q", "r"]  # each asked once, and kept
    notes = [f.data() for f in journal.frames("r") if f.kind == "note" and f.name == REASKED]
    asked_live = [n for n in notes if n.get("key")]  # not the leftovers' (key None)
    assert sorted(n.get("step", -1) for n in asked_live) == [-1, 1]
    inserted = next(n for n in asked_live if "step" not in n)
    assert inserted["recorded_key"] is None and inserted["paths"] == []
    assert redrive.run_fingerprint(journal, "r").reasked[:1] == (1,)
    record = journal.get_run("r")
    assert record is not None and record.status == "succeeded"
    responses = [f for f in journal.frames("r") if f.kind == "model_response"]
    assert len(responses) == 3  # p (the first attempt), q and r: none lost
    asked.clear()
    again = _drive(face, journal, asked, ["q", "r"], replay=CONTINUE, live=False)
    assert again == output and asked == []  # the finished run replays whole
