"""The unit layer's guard (tests/unit/conftest.py) fails a test that needs the integration layer's parts."""

from __future__ import annotations

from pathlib import Path

import pytest

GUARD = Path(__file__).with_name("conftest.py")


@pytest.fixture
def guarded(pytester: pytest.Pytester) -> pytest.Pytester:
    """A suite in a temporary directory with the unit layer's conftest, and stand-ins named like the integration
    layer's fixtures (the guard goes by name)."""
    pytester.makeconftest(
        GUARD.read_text()
        + "\n\n@pytest.fixture\ndef kafka() -> str:\n    return 'broker'\n"
        + "\n\n@pytest.fixture\ndef s3() -> str:\n    return 'server'\n"
    )
    return pytester


def test_a_test_that_asks_for_the_broker_or_s3_fails(guarded: pytest.Pytester) -> None:
    guarded.makepyfile(
        test_it="def test_broker(kafka):\n    pass\n\n"
        "def test_s3(s3):\n    pass\n\n"
        "def test_pure():\n    assert 1 + 1 == 2\n"
    )
    result = guarded.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, errors=2)  # refused at setup
    result.stdout.fnmatch_lines(["*a unit test may not use kafka: it belongs in tests/, the integration layer*"])


def test_a_test_that_starts_a_process_in_any_way_fails(guarded: pytest.Pytester) -> None:
    guarded.makepyfile(
        test_it="import multiprocessing, os, subprocess\n"
        "import pytest\n\n"
        "@pytest.fixture(scope='module')\n"
        "def server():\n    return subprocess.Popen(['sleep', '1'])\n\n"
        "def test_java():\n    subprocess.run(['java', '-version'])\n\n"
        "def test_shell():\n    os.system('true')\n\n"
        "def test_spawn():\n    os.posix_spawnp('true', ['true'], dict(os.environ))\n\n"
        "def test_fork():\n    multiprocessing.get_context('fork').Process(target=print).start()\n\n"
        "def test_module_fixture(server):\n    pass\n"
    )
    result = guarded.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=4, errors=1)
    for what in ("subprocess ['java', '-version']", "os.system ('true',)", "os.posix_spawnp ('true',)", "os.fork ()"):
        assert f"a unit test may not start a process ({what}): it belongs in tests/" in result.stdout.str(), what
