"""The support desk's tools, and the side-effect log that proves what they did.

Every call of a tool body appends one JSON line to the side-effect log (a
file outside the worker process, written with one ``O_APPEND`` write and an
fsync), so a crashed worker cannot lose or hide an execution: the log is the
ground truth the demo and the crash tests count from.

* ``lookup_customer``: read-only (re-running it is harmless).
* ``open_ticket``: a side effect, not restart-safe (a second call opens a second ticket).
* ``send_email``: a side effect, not restart-safe (a second call sends a second email).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Literal

from .. import idempotency_key, tool

__all__ = [
    "CUSTOMERS",
    "configure",
    "log_path",
    "lookup_customer",
    "open_ticket",
    "read_log",
    "send_email",
]

#: The customer directory (synthetic people, example.com addresses).
CUSTOMERS: dict[str, dict[str, str]] = {
    "ada.lovelace@example.com": {
        "customer_id": "cus_8f2k1",
        "name": "Ada Lovelace",
        "email": "ada.lovelace@example.com",
        "plan": "business",
    },
    "grace.hopper@example.com": {
        "customer_id": "cus_3h9x7",
        "name": "Grace Hopper",
        "email": "grace.hopper@example.com",
        "plan": "personal",
    },
}

_ENV = "REDRIVE_DEMO_LOG"
_log: Path | None = None


def configure(path: str | os.PathLike[str]) -> None:
    """Set the side-effect log file the tools append to (also read from ``$REDRIVE_DEMO_LOG``)."""
    global _log
    _log = Path(path)


def log_path() -> Path:
    """Return the side-effect log file.

    Raises:
        RuntimeError: neither :func:`configure` nor ``$REDRIVE_DEMO_LOG`` set it.
    """
    if _log is not None:
        return _log
    env = os.environ.get(_ENV)
    if env:
        return Path(env)
    raise RuntimeError(
        "the demo tools have no side-effect log: call redrive.demo.tools.configure(path) or "
        f"set ${_ENV}"
    )


def _append(entry: dict[str, Any]) -> None:
    line = (json.dumps(entry, sort_keys=True) + "\n").encode()
    fd = os.open(log_path(), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)


def read_log(path: str | os.PathLike[str] | None = None) -> list[dict[str, Any]]:
    """Return the side-effect log's entries (oldest first; [] when there is no log yet).

    Each entry has ``tool``, ``run_id``, ``idempotency_key``, ``pid``, ``at``
    (Unix seconds), ``args`` and ``result``.
    """
    file = Path(path) if path is not None else log_path()
    if not file.exists():
        return []
    return [json.loads(line) for line in file.read_text().splitlines() if line.strip()]


def _record(name: str, args: dict[str, Any], result: Any) -> None:
    key = idempotency_key()
    _append(
        {
            "tool": name,
            "run_id": key.rsplit(":", 2)[0] if key else None,
            "idempotency_key": key,
            "pid": os.getpid(),
            "at": time.time(),
            "args": args,
            "result": result,
        }
    )


@tool(name="lookup_customer", read_only=True)
def lookup_customer(email: str) -> dict[str, Any]:
    """Look up a customer by email address.

    Args:
        email: the customer's email address.
    """
    found = CUSTOMERS.get(email.strip().lower())
    result: dict[str, Any] = dict(found) if found else {"error": f"no customer with {email}"}
    _record("lookup_customer", {"email": email}, result)
    return result


@tool(name="open_ticket", restart_safe=False)
def open_ticket(
    customer_id: str, subject: str, priority: Literal["low", "normal", "high"], summary: str
) -> dict[str, Any]:
    """Open a support ticket for a customer; returns the new ticket's id.

    Args:
        customer_id: the customer's id, from lookup_customer.
        subject: a one-line subject.
        priority: how urgent the ticket is.
        summary: what happened, in a sentence or two.
    """
    opened = sum(1 for entry in read_log() if entry["tool"] == "open_ticket")
    result = {"ticket_id": f"TCK-{1042 + opened}", "status": "open", "priority": priority}
    _record(
        "open_ticket",
        {"customer_id": customer_id, "subject": subject, "priority": priority, "summary": summary},
        result,
    )
    return result


@tool(name="send_email", restart_safe=False)
def send_email(to: str, subject: str, body: str) -> dict[str, Any]:
    """Send an email to a customer.

    Args:
        to: the recipient's address.
        subject: the subject line.
        body: the plain-text body.
    """
    sent = sum(1 for entry in read_log() if entry["tool"] == "send_email")
    result = {"message_id": f"<msg-{5310 + sent}@support.example.com>", "status": "sent"}
    _record("send_email", {"to": to, "subject": subject, "body": body}, result)
    return result
