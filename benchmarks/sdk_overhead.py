"""Overhead of a redrive-wrapped OpenAI client call vs the bare client.

Every variant sends the same chat completion through the real SDK to an
httpx MockTransport (no network), so the numbers are the SDK's own cost plus
redrive's. Reported: median microseconds per call and the ratio to bare.

    python benchmarks/sdk_overhead.py [--calls 300] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import httpx2
import openai

import redrive

CHAT = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1,
    "model": "gpt-4o",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "hello there"},
            "finish_reason": "stop",
        }
    ],
    "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
}
MESSAGES = [{"role": "user", "content": "hi"}]


def _client() -> openai.OpenAI:
    transport = httpx2.MockTransport(lambda request: httpx2.Response(200, json=CHAT))
    return openai.OpenAI(
        api_key="sk-bench", http_client=httpx2.Client(transport=transport), max_retries=0
    )


def _per_call(fn: Callable[[int], None], calls: int, repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(calls)
        samples.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(samples)


def main() -> None:
    """Print the per-call medians and ratios."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    bare = _client()
    wrapped = redrive.wrap(_client())
    counter = iter(range(10**9))

    def call(client: openai.OpenAI, i: int) -> None:
        client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": f"hi {i}"}]
        )

    def run_bare(n: int) -> None:
        for i in range(n):
            call(bare, i)

    def run_outside(n: int) -> None:
        for i in range(n):
            call(wrapped, i)

    journal = redrive.open_journal(":memory:")
    recorded: list[str] = []

    def run_record(n: int) -> None:
        run_id = f"bench-{next(counter)}"
        recorded.append(run_id)
        with redrive.run(journal, run_id):
            for i in range(n):
                call(wrapped, i)

    replay_ids = iter(recorded)

    def run_replay(n: int) -> None:
        with redrive.run(journal, next(replay_ids)):
            for i in range(n):
                call(wrapped, i)

    for fn in (run_bare, run_outside):  # warm up
        fn(20)
    results = {
        "bare client": _per_call(run_bare, args.calls, args.repeats),
        "wrapped, outside a run": _per_call(run_outside, args.calls, args.repeats),
        "wrapped, in a run (record)": _per_call(run_record, args.calls, args.repeats),
    }
    replay_ids = iter(recorded)
    results["wrapped, in a run (replay)"] = _per_call(run_replay, args.calls, args.repeats)
    base = results["bare client"]
    print(f"{'variant':32} {'us/call':>10} {'ratio':>7}")
    for name, value in results.items():
        print(f"{name:32} {value:10.1f} {value / base:7.2f}")


if __name__ == "__main__":
    main()
