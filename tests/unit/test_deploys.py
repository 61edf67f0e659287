"""Runs across deploys: fingerprints, resuming after a code change (continue_live), and logs."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import redrive
from redrive.replay import REASKED, ReplayPolicy
from redrive.storage import MemoryJournal
from tests.conftest import Drive, Loop

CONTINUE = ReplayPolicy(on_drift="continue_live")


class Desk:
    """A refund desk for one face: a model whose answer depends on its prompt, two tools.

    ``effects`` counts tool body executions (the outside side-effect log);
    ``asked`` counts model calls that went out.
    """

    def __init__(self, drive: Drive) -> None:
        self.effects: list[str] = []
        self.asked: list[str] = []
        self.prompt = "v1: refund damaged orders"
        self.amount = 10
        self.drive = drive

        @drive.model
        def ask(system: str, text: str) -> str:
            self.asked.append(system)
            return f"{text} ({system[:2]})"

        @drive.tool(restart_safe=False)
        def refund(order: str, amount: int) -> dict[str, Any]:
            self.effects.append(f"refund {order} {amount}")
            return {"refunded": order, "amount": amount}

        @drive.tool(restart_safe=False)
        def email(to: str, body: str) -> str:
            self.effects.append(f"email {to}")
            return "sent"

        self.ask, self.refund, self.email = ask, refund, email

    def loop(self, run: redrive.Run) -> Loop:
        """Ask, refund, ask again, email, answer."""
        first = yield self.ask(system=self.prompt, text="order A arrived damaged")
        receipt = yield self.refund("A", self.amount)
        second = yield self.ask(system=self.prompt, text=f"refunded {receipt['amount']}")
        yield self.email("ada@example.com", second)
        return run.finish(f"{first} / {second}")


def _reasked(journal: Any, run_id: str) -> list[dict[str, Any]]:
    return [f.data() for f in journal.frames(run_id) if f.kind == "note" and f.name == REASKED]


def test_prompt_change_after_a_crash_continues_live_without_repeating_a_side_effect(
    drive: Drive,
) -> None:
    """A prompt edited between a crash and its resume: the drifted model step is re-asked
    live with the new prompt, the finished refund is replayed (not re-run), a note records
    the re-ask, and the finished run then replays as a whole."""
    journal = MemoryJournal()
    desk = Desk(drive)
    drive.crash(journal, "r", "tool_recorded", "refund", desk.loop, input={"o": "A"})
    assert desk.effects == ["refund A 10"]
    desk.prompt = "v2: refund damaged orders, apologise"
    with pytest.raises(redrive.DivergenceError) as strict:
        drive.run(journal, "r", desk.loop, input={"o": "A"})
    assert strict.value.seq == 1 and desk.effects == ["refund A 10"]
    ran = drive.run(journal, "r", desk.loop, input={"o": "A"}, replay=CONTINUE)
    assert ran.run.status == "succeeded"
    assert desk.effects == ["refund A 10", "email ada@example.com"]  # the refund ran once
    assert desk.asked[-2:] == [desk.prompt, desk.prompt]  # both model steps asked anew
    assert ran.run.replayed_steps == 1 and ran.run.live_steps == 3
    notes = _reasked(journal, "r")
    assert [n["step"] for n in notes] == [1] and notes[0]["paths"] == ["$.system"]
    fp = redrive.run_fingerprint(journal, "r")
    assert fp.reasked == (1,)
    assert len(fp.prompts) == 2  # the old and the new prompt were both sent
    before = list(desk.effects)
    again = drive.run(journal, "r", desk.loop, input={"o": "A"}, live=False)
    assert again.value == ran.value and desk.effects == before
    assert again.run.replayed_steps == 4


def test_a_changed_tool_argument_still_diverges_and_runs_nothing(drive: Drive) -> None:
    """continue_live re-asks model steps only: a finished tool step asked with other
    arguments is a divergence, and the side effect does not run a second time."""
    journal = MemoryJournal()
    desk = Desk(drive)
    drive.crash(journal, "r", "tool_recorded", "refund", desk.loop)
    desk.prompt, desk.amount = "v2 prompt", 12
    with pytest.raises(redrive.DivergenceError) as info:
        drive.run(journal, "r", desk.loop, replay=CONTINUE)
    assert info.value.name == "refund"
    assert [path for path, _a, _b in info.value.diff or []] == ["$.amount"]
    assert desk.effects == ["refund A 10"]


def test_a_loop_that_skips_a_recorded_tool_step_does_not_continue(drive: Drive) -> None:
    """A model step asked where the record still has a tool step of that turn (the new
    code skips a finished side effect) diverges, whatever on_drift says."""
    journal = MemoryJournal()
    desk = Desk(drive)
    drive.crash(journal, "r", "model_recorded", "model:ask", desk.loop, occurrence=2)

    def skipping(run: redrive.Run) -> Loop:
        yield desk.ask(system="v2", text="order A arrived damaged")
        yield desk.ask(system="v2", text="skipped the refund")
        return run.finish("x")

    with pytest.raises(redrive.DivergenceError):
        drive.run(journal, "r", skipping, replay=CONTINUE)
    assert desk.effects == ["refund A 10"] and desk.asked == [desk.prompt, desk.prompt, "v2"]
    assert [n["step"] for n in _reasked(journal, "r")] == [1]  # only the first was re-asked


def test_replay_only_runs_never_continue_live(drive: Drive) -> None:
    """A replay-only run (live=False, as `redrive check`) raises at drift under continue_live."""
    journal = MemoryJournal()
    desk = Desk(drive)
    drive.run(journal, "r", desk.loop)
    desk.prompt = "v2"
    with pytest.raises(redrive.DivergenceError):
        drive.run(journal, "r", desk.loop, live=False, replay=CONTINUE)


def test_deployment_default_by_setter_and_env(
    drive: Drive, monkeypatch: pytest.MonkeyPatch
) -> None:
    """on_drift is opt-in per deployment: set_default_on_drift() or $REDRIVE_ON_DRIFT."""
    assert ReplayPolicy().on_drift == "raise"
    monkeypatch.setenv("REDRIVE_ON_DRIFT", "continue_live")
    assert ReplayPolicy.of("strict").on_drift == "continue_live"
    monkeypatch.setenv("REDRIVE_ON_DRIFT", "sometimes")
    with pytest.raises(ValueError, match="REDRIVE_ON_DRIFT"):
        ReplayPolicy()
    monkeypatch.delenv("REDRIVE_ON_DRIFT")
    redrive.set_default_on_drift("continue_live")
    try:
        journal = MemoryJournal()
        desk = Desk(drive)
        drive.crash(journal, "r", "tool_recorded", "refund", desk.loop)
        desk.prompt = "v2"
        assert drive.run(journal, "r", desk.loop).run.status == "succeeded"  # replay="strict"
        assert desk.effects.count("refund A 10") == 1
    finally:
        redrive.set_default_on_drift(None)
    with pytest.raises(ValueError, match="on_drift"):
        redrive.set_default_on_drift("always")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="on_drift"):
        ReplayPolicy(on_drift="always")  # type: ignore[arg-type]


def test_a_reask_lost_in_a_second_crash_is_asked_again(drive: Drive) -> None:
    """A worker killed after journaling the re-ask note but before the new request: the
    next resume asks that model step live again, and the refund still ran once."""
    journal = MemoryJournal()
    desk = Desk(drive)
    drive.crash(journal, "r", "tool_recorded", "refund", desk.loop)
    desk.prompt = "v2"
    drive.crash(journal, "r", "model_after", "model:ask", desk.loop, replay=CONTINUE)
    ran = drive.run(journal, "r", desk.loop, replay=CONTINUE)
    assert ran.run.status == "succeeded" and desk.effects.count("refund A 10") == 1


@given(
    face=st.sampled_from(["sync", "async"]),
    crash_at=st.integers(min_value=0, max_value=5),
    changed=st.lists(st.booleans(), min_size=3, max_size=3),
)
@settings(deadline=None)
def test_property_no_side_effect_twice_whatever_prompts_change(
    face: str, crash_at: int, changed: list[bool]
) -> None:
    """Kind: resume after any set of prompt changes at any crash point, on either face,
    under continue_live. Every tool body runs once in all, the run finishes, and its
    finished journal replays as a whole with no model call and no tool body."""
    drive = Drive(face)  # type: ignore[arg-type]
    journal = MemoryJournal()
    effects: list[str] = []
    asked: list[str] = []
    prompts = ["p0", "p1", "p2"]

    @drive.model
    def ask(system: str, n: int) -> str:
        asked.append(system)
        return f"{system}:{n}"

    @drive.tool(restart_safe=False)
    def act(n: int) -> int:
        effects.append(f"act {n}")
        return n

    def loop(run: redrive.Run) -> Loop:
        out = []
        for n in range(3):
            out.append((yield ask(system=prompts[n], n=n)))
            yield act(n)
        return run.finish(out)

    points = [("tool_recorded", "act", k) for k in (1, 2, 3)]
    points += [("model_recorded", "model:ask", k) for k in (1, 2, 3)]
    point, name, occurrence = points[crash_at]
    drive.crash(journal, "r", point, name, loop, occurrence=occurrence)
    for i, flag in enumerate(changed):
        if flag:
            prompts[i] = f"p{i}-v2"
    ran = drive.run(journal, "r", loop, replay=CONTINUE)
    assert ran.run.status == "succeeded"
    assert effects == ["act 0", "act 1", "act 2"]  # each tool body exactly once in all
    assert ran.value == [f"{p}:{n}" for n, p in enumerate(prompts)]  # the new prompts
    calls = len(asked)
    replayed = drive.run(journal, "r", loop, live=False)
    assert replayed.value == ran.value and len(asked) == calls and len(effects) == 3


def test_fingerprint_records_app_version_tools_models_and_prompts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A run records its app version (option, else env, else git/package), redrive's
    version and the tool set; models and prompt hashes come from its model steps."""
    journal = MemoryJournal()
    desk = Desk(Drive("sync"))
    drive = desk.drive
    drive.run(journal, "opt", desk.loop, app_version="2026.11.30")
    monkeypatch.setenv("REDRIVE_APP_VERSION", "from-env")
    drive.run(journal, "env", desk.loop)
    monkeypatch.delenv("REDRIVE_APP_VERSION")
    drive.run(journal, "auto", desk.loop)
    opt = redrive.run_fingerprint(journal, "opt")
    assert (opt.app_version, opt.app_version_source) == ("2026.11.30", "option")
    env = redrive.run_fingerprint(journal, "env")
    assert (env.app_version, env.app_version_source) == ("from-env", "env")
    auto = redrive.run_fingerprint(journal, "auto")
    assert auto.app_version_source in ("git", "package", "unknown")
    assert opt.redrive == redrive.__version__
    assert set(opt.tools["refund"]) == {"sig", "decl", "doc"}
    assert opt.models == ("model:ask",) and len(opt.prompts) == 1 and opt.reasked == ()
    with pytest.raises(TypeError, match="app_version"):
        redrive.run(journal, "bad", app_version=3)  # type: ignore[arg-type]
    with pytest.raises(redrive.UnknownRunError):
        redrive.run_fingerprint(journal, "nope")


def test_fingerprint_reads_sdk_request_shapes() -> None:
    """Model names and system prompts are read from OpenAI, Anthropic and Responses bodies."""
    from redrive.replay._fingerprint import model_name, system_prompts

    chat = {"body": {"model": "gpt-4o", "messages": [{"role": "system", "content": "be kind"}]}}
    claude = {"body": {"model": "claude-x", "system": [{"type": "text", "text": "be brief"}]}}
    responses = {"body": {"model": "o4", "instructions": "think", "input": "hi"}}
    assert model_name("openai:POST /chat/completions", chat) == "gpt-4o"
    assert system_prompts(chat) == ["be kind"]
    assert system_prompts(claude) == [["be brief"]]
    assert system_prompts(responses) == ["think"]
    assert model_name("model:fn", ["positional"]) == "model:fn"


def _records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "redrive"]


def test_lifecycle_events_go_to_the_redrive_logger(
    drive: Drive, caplog: pytest.LogCaptureFixture
) -> None:
    """start, interrupted, resume, reasked and finish are logged with structured fields."""
    caplog.set_level(logging.INFO, logger="redrive")
    journal = MemoryJournal()
    desk = Desk(drive)

    def interrupted(run: redrive.Run) -> Loop:
        yield desk.ask(system=desk.prompt, text="order A arrived damaged")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        drive.run(journal, "r", interrupted)
    desk.prompt = "v2"
    drive.run(journal, "r", desk.loop, replay=CONTINUE)
    events = [(r.redrive_event, r.run_id) for r in _records(caplog)]  # type: ignore[attr-defined]
    assert [e for e, _ in events] == ["start", "interrupted", "resume", "reasked", "finish"]
    assert {rid for _, rid in events} == {"r"}
    finish = _records(caplog)[-1]
    assert finish.redrive_status == "succeeded"  # type: ignore[attr-defined]
    assert (finish.redrive_replayed, finish.redrive_live) == (0, 4)  # type: ignore[attr-defined]
    assert finish.redrive_reasked == 1  # type: ignore[attr-defined]
    reasked = _records(caplog)[3]
    assert reasked.redrive_seq == 1 and reasked.redrive_paths == ["$.system"]  # type: ignore[attr-defined]


def test_divergence_and_blocked_are_warnings(
    drive: Drive, caplog: pytest.LogCaptureFixture
) -> None:
    """A divergence and a blocked side effect are logged as warnings naming the seq."""
    caplog.set_level(logging.INFO, logger="redrive")
    journal = MemoryJournal()
    desk = Desk(drive)
    drive.crash(journal, "r", "tool_claimed", "refund", desk.loop)
    with pytest.raises(redrive.SideEffectRetryBlockedError):
        drive.run(journal, "r", desk.loop)
    blocked = _records(caplog)[-1]
    assert blocked.redrive_event == "blocked" and blocked.levelno == logging.WARNING  # type: ignore[attr-defined]
    assert blocked.redrive_seq == 3  # type: ignore[attr-defined]
    drive.run(journal, "s", desk.loop)
    desk.prompt = "v2"
    with pytest.raises(redrive.DivergenceError):
        drive.run(journal, "s", desk.loop, live=False)
    diverged = _records(caplog)[-1]
    assert diverged.redrive_event == "divergence" and diverged.redrive_seq == 1  # type: ignore[attr-defined]


def test_logged_text_passes_the_scrubber(caplog: pytest.LogCaptureFixture) -> None:
    """A secret in an error that stops a run never reaches a log record."""
    caplog.set_level(logging.INFO, logger="redrive")
    secret = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6"
    journal = MemoryJournal()
    with pytest.raises(ConnectionError), redrive.run(journal, "r"):
        raise ConnectionError(f"upstream refused key {secret}")
    with pytest.raises(ValueError), redrive.run(journal, "f"):
        raise ValueError(f"Bearer {secret}")
    texts = [str(value) for r in _records(caplog) for value in (r.getMessage(), *vars(r).values())]
    assert any("upstream refused key" in t for t in texts)
    assert not any(secret in t for t in texts)
    failed = _records(caplog)[-1]
    assert failed.redrive_status == "failed" and failed.levelno == logging.ERROR  # type: ignore[attr-defined]


def test_check_tells_a_run_that_resumed_across_a_change(drive: Drive) -> None:
    """check_run reports the re-asked steps of a run that resumed across a code change."""
    journal = MemoryJournal()
    desk = Desk(drive)
    drive.crash(journal, "r", "tool_recorded", "refund", desk.loop)
    desk.prompt = "v2"
    drive.run(journal, "r", desk.loop, replay=CONTINUE)
    drive.run(journal, "plain", desk.loop)
    from redrive._check import check_run

    # no entrypoint recorded: the check cannot re-drive, but it reads the notes
    across = check_run((journal, "r"))
    plain = check_run((journal, "plain"))
    assert across.reasked == (1,) and "resumed across a code change" in across.message
    assert plain.reasked == () and "resumed across" not in plain.message


def test_a_shorter_path_after_a_reask_drops_only_harmless_leftovers(drive: Drive) -> None:
    """After a re-ask the new path may be shorter: recorded model steps and read-only
    lookups it never asks for are superseded (noted); a finished side effect it never
    asks for is a divergence at the end, never silently dropped."""
    journal = MemoryJournal()
    effects: list[str] = []
    prompt = ["v1"]

    @drive.model
    def ask(system: str) -> str:
        return "look it up" if system == "v1" else "done"

    @drive.tool(read_only=True)
    def lookup(order: str) -> str:
        effects.append("lookup")
        return "damaged"

    @drive.tool(restart_safe=False)
    def refund(order: str) -> str:
        effects.append("refund")
        return "ok"

    def loop(tool: Any) -> Callable[[redrive.Run], Loop]:
        def body(run: redrive.Run) -> Loop:
            answer = yield ask(system=prompt[0])
            if answer == "look it up":
                yield tool("A")
                yield ask(system=prompt[0] + " again")
            return run.finish(answer)

        return body

    drive.crash(journal, "r", "model_recorded", "model:ask", loop(lookup), occurrence=2)
    prompt[0] = "v2"
    ran = drive.run(journal, "r", loop(lookup), replay=CONTINUE)
    assert ran.value == "done" and effects == ["lookup"]
    assert len(_reasked(journal, "r")) == 3  # the re-ask, then the lookup and the model step
    assert drive.run(journal, "r", loop(lookup), live=False).value == "done"
    prompt[0] = "v1"
    drive.crash(journal, "s", "model_recorded", "model:ask", loop(refund), occurrence=2)
    prompt[0] = "v2"
    with pytest.raises(redrive.DivergenceError, match="more steps"):
        drive.run(journal, "s", loop(refund), replay=CONTINUE)
    assert effects == ["lookup", "refund"]


def test_openai_sdk_prompt_edit_between_crash_and_resume() -> None:
    """The issue's case on the real OpenAI SDK: a system prompt edited between a crash and
    its resume; under continue_live the first chat completion is asked again with the new
    prompt, the refund is replayed (the model's new call id does not matter), the run
    finishes, and the fingerprint shows the model and both prompt hashes."""
    import json

    import openai

    from tests.sdkserver import Reply, serve

    def chat(message: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": "chatcmpl-x",
            "object": "chat.completion",
            "created": 1,
            "model": "gpt-4o",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
        }

    def refund_call(call_id: str) -> dict[str, Any]:
        arguments = json.dumps({"order": "A"})
        function = {"name": "refund", "arguments": arguments}
        return chat(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": call_id, "type": "function", "function": function}],
            }
        )

    effects: list[str] = []

    @redrive.tool(restart_safe=False)
    def refund(order: str) -> dict[str, str]:
        effects.append(order)
        return {"refunded": order}

    journal = MemoryJournal()
    with serve() as server:
        server.add(Reply(body=refund_call("c1")))
        client = redrive.wrap(
            openai.OpenAI(base_url=server.url + "/v1", api_key="sk-x", max_retries=0)
        )

        def handle(system: str, *, crash: bool, **options: Any) -> Any:
            with redrive.run(journal, "sdk", input={"order": "A"}, **options) as run:
                messages: list[Any] = [
                    {"role": "system", "content": system},
                    {"role": "user", "content": "order A arrived damaged"},
                ]
                reply = client.chat.completions.create(model="gpt-4o", messages=messages)
                message = reply.choices[0].message
                messages.append(message.model_dump(exclude_none=True))
                for call in message.tool_calls or []:
                    result = refund(**json.loads(call.function.arguments))  # type: ignore[union-attr]
                    messages.append(
                        {"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)}
                    )
                if crash:
                    raise ConnectionError("the worker was cut off")  # resumable
                final = client.chat.completions.create(model="gpt-4o", messages=messages)
                return run.finish(final.choices[0].message.content)

        with pytest.raises(ConnectionError):
            handle("v1: you refund orders", crash=True)
        server.add(
            Reply(body=refund_call("c9")),
            Reply(body=chat({"role": "assistant", "content": "Refunded A."})),
        )
        out = handle("v2: you refund orders kindly", crash=False, replay=CONTINUE)
        assert out == "Refunded A." and effects == ["A"] and len(server.requests) == 3
        assert handle("v2: you refund orders kindly", crash=False, live=False) == out
        assert len(server.requests) == 3  # the finished run replayed without a model call
    fp = redrive.run_fingerprint(journal, "sdk")
    assert fp.models == ("gpt-4o",) and len(fp.prompts) == 2 and fp.reasked == (1,)
    notes = _reasked(journal, "sdk")
    assert notes[0]["paths"] == ["$.body.messages[0].content"]


def test_lease_lost_is_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    """A worker whose lease was taken over stops at its next write; the log says so."""
    caplog.set_level(logging.INFO, logger="redrive")
    journal = MemoryJournal()
    desk = Desk(Drive("sync"))

    def taken_over(run: redrive.Run) -> Loop:
        yield desk.ask(system=desk.prompt, text="order A arrived damaged")
        lease = run._block._lease
        assert lease.epoch is not None
        journal.renew_lease("r", lease.owner, lease.epoch, 0)  # it lapses at once
        journal.acquire_lease("r", "another worker", 60)
        yield desk.refund("A", 10)
        return None

    with pytest.raises(redrive.LeaseLostError):
        desk.drive.run(journal, "r", taken_over, lease=60)
    lost = _records(caplog)[-1]
    assert lost.redrive_event == "lease_lost" and lost.levelno == logging.WARNING  # type: ignore[attr-defined]
    assert desk.effects == []  # the refund's claim was refused before its body ran


@given(
    face=st.sampled_from(["sync", "async"]),
    crash_at=st.integers(min_value=1, max_value=3),
    change=st.sampled_from(["rename", "drop"]),
    which=st.integers(min_value=0, max_value=2),
    on_drift=st.sampled_from(["strict", "continue_live"]),
)
@settings(deadline=None, max_examples=30)
def test_property_a_renamed_or_dropped_recorded_call_never_lets_later_calls_go_live(
    face: str, crash_at: int, change: str, which: int, on_drift: str
) -> None:
    """Kind (outside: temporalio/sdk-rust#443, a renamed activity; PostHog/posthog#60956, a
    removed one): an unfinished run whose new code renames or drops a call the record
    holds before the crash point diverges at that call; no tool body runs on the resume,
    under strict replay and under continue_live alike."""
    drive = Drive(face)  # type: ignore[arg-type]
    journal = MemoryJournal()
    effects: list[str] = []
    names: list[str | None] = ["a", "b", "c"]

    @drive.model
    def ask(n: int) -> str:
        return f"plan {n}"

    def side_effect(name: str) -> Any:
        def body(n: int) -> int:
            effects.append(f"{name} {n}")
            return n

        return drive.tool(restart_safe=False, name=name)(body)

    tools = {name: side_effect(name) for name in ("a", "b", "c", "a2", "b2", "c2")}

    def loop(run: redrive.Run) -> Loop:
        for n, name in enumerate(names):
            if name is None:
                continue
            yield ask(n=n)
            yield tools[name](n=n)
        return run.finish("done")

    drive.crash(journal, "r", "tool_recorded", str(names[crash_at - 1]), loop)
    before = list(effects)
    changed_index = min(which, crash_at - 1)  # a call recorded before the crash
    if change == "rename":
        names[changed_index] = f"{names[changed_index]}2"
    else:
        names[changed_index] = None
    policy = CONTINUE if on_drift == "continue_live" else ReplayPolicy()
    with pytest.raises(redrive.DivergenceError):
        drive.run(journal, "r", loop, replay=policy)
    assert effects == before, f"a tool ran on the resume: {effects[len(before) :]}"
