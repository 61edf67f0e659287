"""``redrive demo``: a support-desk agent killed mid-run, resumed, replayed and checked.

The demo starts a scripted OpenAI-compatible model server on 127.0.0.1 and
runs the support-desk job (look the customer up, open a ticket, email the
ticket number) in worker processes on a DuckDB journal:

1. the first worker is killed with SIGKILL after ``open_ticket`` was journaled
   and before ``send_email`` ran;
2. a new worker resumes the run: the finished steps are replayed from the
   journal (no model call, no tool execution), the rest runs live;
3. a third worker replays the finished run: zero model calls, zero tool executions;
4. a fourth worker runs a changed version of the code under strict replay and
   stops with a ``DivergenceError`` naming the step and the changed argument.

What happened is read from outside the workers: the side-effect log the
tools append to, and the model server's request counter.

Modules: :mod:`.server` (the model server), :mod:`.tools` (the tools and
their log), :mod:`.worker` (the worker process).
"""

from __future__ import annotations

from ._main import main

__all__ = ["main"]
