"""Misuses of the public API that ``mypy --strict`` must reject (run by tests/unit/test_static.py).

Not collected by pytest and never run. Each line ending in ``# rejects: [code]``
must get a mypy error of that code, and no other line may get one: a typo in
a run option, a wrong argument to a decorated tool or model, a misspelt error
field are caught before the code runs.
"""

from __future__ import annotations

import openai

import redrive
from redrive.errors import DivergenceError


@redrive.tool(read_only=True)
def lookup(customer: str) -> dict[str, str]:
    return {"customer": customer}


@redrive.model
def ask(prompt: str) -> str:
    return prompt


@redrive.durable(":memory:", run_id="ticket:{ticket_id}")
async def handle_ticket(ticket_id: int) -> str:
    return str(ticket_id)


def run_options(journal: redrive.Journal) -> None:
    redrive.run(journal, "x", replya="strict")  # rejects: [call-arg]
    redrive.run(journal, "x", lease="30")  # rejects: [arg-type]


async def decorated(client: openai.OpenAI) -> None:
    lookup(42)  # rejects: [arg-type]
    lookup("c", limit=3)  # rejects: [call-arg]
    answer: int = ask("p")  # rejects: [assignment]
    text: int = await handle_ticket(1)  # rejects: [assignment]
    create = redrive.wrap(client).chat.completionz  # rejects: [attr-defined]
    print(answer, text, create)


def error_fields(err: DivergenceError) -> None:
    print(err.difff)  # rejects: [attr-defined]
    DivergenceError("diverged", difff=[])  # rejects: [call-arg]


def lazy_names() -> None:
    """A misspelt name of a package that loads some names on first use (PEP 562)."""
    from redrive import chek_run  # rejects: [attr-defined]
    from redrive.recorders import wrapp  # rejects: [attr-defined]
    from redrive.replay import rendr_run  # rejects: [attr-defined]

    print(rendr_run, wrapp, chek_run)
