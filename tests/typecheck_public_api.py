"""Type-check-only use of the public API (run by mypy in tests/unit/test_static.py).

Not collected by pytest (no ``test_`` prefix); it must type-check under
``mypy --strict`` so the public surface stays typed for users.
"""

from __future__ import annotations

import asyncio
import datetime
import uuid

import redrive


@redrive.tool(read_only=True)
def lookup(customer: str) -> dict[str, str]:
    return {"customer": customer}


@redrive.tool(restart_safe=True, recover=lambda args, key: redrive.Recovery.unknown("?"))
def send(to: str, idempotency_key: str | None = None) -> str:
    return to


@redrive.model
def ask(prompt: str) -> str:
    return prompt


def main() -> None:
    journal: redrive.Journal = redrive.open_journal(":memory:")
    policy = redrive.ReplayPolicy(tool="strict", model="warn", ignore=("$..request_id",))
    with redrive.run(journal, "job:1", input={"q": 1}, replay=policy, lease=30.0) as run:
        when: datetime.datetime = redrive.now()
        ident: uuid.UUID = redrive.uuid4()
        share: float = redrive.random()
        key: str | None = redrive.idempotency_key()
        run.finish([lookup("c"), send("a"), ask("p"), str(when), str(ident), share, key])
    status: str = run.status
    counts: int = run.replayed_steps + run.live_steps
    assert status and counts >= 0
    try:
        with redrive.run(journal, "job:1", live=False):
            pass
    except redrive.DivergenceError as err:
        print(err.run_id, err.seq)
    except redrive.ReplayError:
        raise


async def amain() -> None:
    async with redrive.run(":memory:", "job:2") as run:
        run.finish(1)


if __name__ == "__main__":
    main()
    asyncio.run(amain())
