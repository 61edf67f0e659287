"""The pytest plugin at every fixture scope (issue 27 #4): recorded once, replayed, guarded in CI.

Each test drives real pytest in a pytester sandbox; what the fixtures called
live is counted outside pytest (a log file, or the scripted server's requests).
"""

from __future__ import annotations

import gc
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]


@pytest.fixture(autouse=True)
def _no_garbage_of_earlier_tests() -> Iterator[None]:
    """Finalize what earlier tests left unclosed before a sandbox pytest runs in this process.

    The in-process sandbox collects unraisable exceptions: a socket an earlier test's
    client left open, finalized during the sandbox's run, would fail the sandbox's test.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()
    yield


CONFTEST = """
import pathlib
import pytest
import redrive

CALLS = pathlib.Path(__file__).parent / "calls.log"

@redrive.model(name="model:fake")
def fake_model(prompt):
    with CALLS.open("a") as log:
        log.write(prompt + "\\n")
    return prompt.upper()

@pytest.fixture(scope="session", autouse=True)
def warm_up():
    yield fake_model("session-setup")
    fake_model("session-teardown")
"""

PACKAGE_CONFTEST = """
import pytest
from conftest import fake_model

@pytest.fixture(scope="package")
def catalogue():
    return fake_model("package")
"""

MODULE = """
import pytest
from conftest import fake_model
{head}

@pytest.fixture(scope="module")
def summary():
    return fake_model("module")

@pytest.fixture(scope="module", params=["p1", "p2"])
def per_param(request):
    return fake_model(request.param)

@pytest.fixture(scope="class")
def per_class():
    return fake_model("class")

@pytest.fixture(autouse=True)
def each_test():
    return fake_model("function")

def test_a(summary, redrive_run):
    assert summary == "MODULE"

class TestK:
    @pytest.mark.redrive
    def test_b(self, per_class, summary, per_param):
        assert per_class == "CLASS" and per_param in ("P1", "P2")
"""

PACKAGE_TEST = """
import pytest

@pytest.mark.redrive
def test_c(catalogue):
    assert catalogue == "PACKAGE"
"""


@pytest.fixture(autouse=True)
def _no_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)


def _calls(pytester: pytest.Pytester) -> list[str]:
    log = pytester.path / "calls.log"
    calls = log.read_text().split() if log.exists() else []
    log.unlink(missing_ok=True)
    return calls


def _project(pytester: pytest.Pytester, head: str = "") -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_mod=MODULE.format(head=head))
    pkg = pytester.mkpydir("pkg")
    (pkg / "conftest.py").write_text(PACKAGE_CONFTEST)
    (pkg / "test_pkg.py").write_text(PACKAGE_TEST)


EVERY_CALL = [
    "session-setup",
    "module",
    "function",
    "p1",
    "class",
    "function",
    "p2",
    "function",
    "package",
    "session-teardown",
]


def test_every_scope_records_once_and_replays_in_ci(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Session (autouse, with a teardown), package, module, parametrized module, class and
    function fixtures of redrive tests record once; under CI=true and under mode none they
    replay with no live call (on main every fixture above function scope, and the autouse
    function fixture set up before ``redrive_run``, called the model again in CI)."""
    _project(pytester)
    pytester.runpytest().assert_outcomes(passed=4)
    calls = _calls(pytester)
    assert sorted(calls) == sorted(EVERY_CALL), calls
    fixtures = pytester.path / "journals" / "test_mod" / "fixtures"
    assert sorted(p.name.split("-")[0] for p in fixtures.iterdir()) == [
        "TestK.per_class.rdj",
        "per_param_0",
        "per_param_1",
        "summary.rdj",
    ]
    session = pytester.path / "journals" / "fixtures" / "session"
    assert sorted(p.name for p in session.iterdir()) == ["warm_up.rdj", "warm_up.teardown.rdj"]
    assert (pytester.path / "pkg" / "journals" / "fixtures" / "package" / "catalogue.rdj").exists()
    monkeypatch.setenv("CI", "true")
    pytester.runpytest().assert_outcomes(passed=4)
    assert _calls(pytester) == []
    monkeypatch.delenv("CI")
    pytester.runpytest("--redrive-record-mode=none").assert_outcomes(passed=4)
    assert _calls(pytester) == []
    # a fixture whose recording changed diverges instead of calling the model
    (pytester.path / "test_mod.py").write_text(
        MODULE.format(head="").replace('fake_model("module")', 'fake_model("module v2")')
    )
    result = pytester.runpytest("--redrive-record-mode=none", "-k", "test_a")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*re-record fixture 'summary'*--redrive-record-mode=rewrite*"])
    assert _calls(pytester) == []


SDK_MODULE = """
import openai
import pytest
import redrive

@pytest.fixture(scope="module")
def greeting():
    # closed at teardown: a client left to the garbage collector leaks its keep-alive
    # socket into whichever later test the collector runs in (a ResourceWarning there)
    with redrive.wrap(
        openai.OpenAI(base_url={url!r}, api_key="sk-test", max_retries=0)
    ) as client:
        reply = client.chat.completions.create(
            model="gpt-4o", messages=[{{"role": "user", "content": "hi"}}]
        )
        yield reply.choices[0].message.content

@pytest.mark.redrive
def test_one(greeting):
    assert greeting == "hello"

@pytest.mark.redrive
def test_two(greeting):
    assert greeting == "hello"
"""


def test_a_module_fixture_calling_an_sdk_never_reaches_the_network_in_ci(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 27 #4 as reported: a module-scoped fixture calling the model through a wrapped
    OpenAI client is recorded once (one request for two tests) and replayed under CI=true
    (on main the CI run sent the request again)."""
    from tests.sdkserver import Reply, chat_completion, serve

    chat = chat_completion()
    with serve() as server:
        server.add(Reply(body=chat), Reply(body=chat))
        pytester.makepyfile(test_sdk=SDK_MODULE.format(url=server.url + "/v1"))
        pytester.runpytest().assert_outcomes(passed=2)
        assert len(server.requests) == 1
        monkeypatch.setenv("CI", "true")
        pytester.runpytest().assert_outcomes(passed=2)
        assert len(server.requests) == 1


GUARDED = """
import httpx
import pytest

def _request(where):
    try:
        httpx.get("http://127.0.0.1:9/" + where)
    except BaseException:
        pass  # code that swallows even NetworkBlocked does not hide the request

@pytest.fixture(scope="{scope}")
def resource():
    _request("{scope}")
    return 1

@pytest.mark.redrive
def test_x(resource):
    pass
"""


SCOPES = ("session", "module", "class", "function")


def test_the_network_guard_covers_every_fixture_scope_in_ci(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under CI=true an HTTP request a fixture of any scope sends outside recorded steps fails
    its test even when swallowed (on main only requests made after ``redrive_run`` was set up
    were guarded: a wider fixture, or a function fixture set up before it, was not)."""
    for scope in SCOPES:
        pytester.makepyfile(**{f"test_{scope}": GUARDED.format(scope=scope)})
    pytester.runpytest().assert_outcomes(passed=4)  # records (no guard outside mode none)
    monkeypatch.setenv("CI", "true")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert result.parseoutcomes().get("passed", 0) == 0
    for scope in SCOPES:
        result.stdout.fnmatch_lines([f"*GET http://127.0.0.1:9/{scope}*outside recorded steps*"])


MODES_MODULE = """
import pytest
from conftest import fake_model
{head}

@pytest.fixture(scope="module")
def summary():
    return fake_model("module")

def test_a(summary, redrive_run):
    assert summary == "MODULE"
"""


@pytest.mark.parametrize(
    ("command_line", "ci", "marker", "live"),
    [
        (None, False, "all", True),  # the module's marker re-records its fixtures too
        (None, True, "all", False),  # CI beats the marker
        ("all", True, None, True),  # the command line beats CI
        ("none", False, "all", False),  # and beats the marker
    ],
)
def test_record_modes_and_their_precedence_hold_for_fixtures(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    command_line: str | None,
    ci: bool,
    marker: str | None,
    live: bool,
) -> None:
    """The one precedence rule (command line, then CI, then the marker, then ``once``) picks
    a module fixture's mode as it picks a test's; the marker is the module's ``pytestmark``."""
    pytester.makeconftest(CONFTEST.replace("autouse=True", "autouse=False"))
    pytester.makepyfile(test_mod=MODES_MODULE.format(head=""))
    pytester.runpytest().assert_outcomes(passed=1)
    assert _calls(pytester) == ["module"]
    head = f"pytestmark = pytest.mark.redrive(record_mode={marker!r})" if marker else ""
    pytester.makepyfile(test_mod=MODES_MODULE.format(head=head))
    if ci:
        monkeypatch.setenv("CI", "true")
    args = [f"--redrive-record-mode={command_line}"] if command_line else []
    pytester.runpytest(*args).assert_outcomes(passed=1)
    assert _calls(pytester) == (["module"] if live else [])


def test_a_fixture_with_no_recording_fails_in_ci_naming_the_command(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In mode none a wider fixture with no recording that calls the model fails at setup with
    the file and the command that records it, and the model is not called (on main it was)."""
    pytester.makeconftest(CONFTEST.replace("autouse=True", "autouse=False"))
    pytester.makepyfile(test_mod=MODES_MODULE.format(head=""))
    pytester.runpytest().assert_outcomes(passed=1)
    _calls(pytester)
    journal = Path(pytester.path / "journals" / "test_mod" / "fixtures" / "summary.rdj")
    journal.unlink()
    monkeypatch.setenv("CI", "true")
    result = pytester.runpytest()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [
            "*fixture 'summary' (module test_mod.py): record mode 'none' (CI is set) and no "
            "recording at*summary.rdj*",
            "*record fixture 'summary' locally*pytest test_mod.py --redrive-record-mode=once*",
        ]
    )
    # no recording exists: the error does not say the run already succeeded
    result.stdout.fnmatch_lines(["*the run's record is finished and holds no step*"])
    assert "already succeeded" not in result.stdout.str()
    assert _calls(pytester) == []
