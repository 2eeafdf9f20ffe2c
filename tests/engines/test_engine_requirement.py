"""An engine the run requires fails its tests with the reason; elsewhere they skip."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.engines import conftest
from tests.engines.conftest import engine


def test_a_required_engine_that_cannot_be_imported_fails_with_the_install_reason(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TOOLWIRE_REQUIRE_ENGINES", "vllm, nosuchengine")
    monkeypatch.setattr(conftest, "ENGINES_DIR", tmp_path)
    (tmp_path / "nosuchengine.failed").write_text(
        "installing nosuchengine==1 failed after 3 s: no matching distribution")
    with pytest.raises(pytest.fail.Exception) as caught:
        engine("nosuchengine")
    assert "cannot be imported here: ModuleNotFoundError" in str(caught.value)
    assert "no matching distribution" in str(caught.value)


def test_an_engine_the_run_does_not_require_skips_with_the_reason(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TOOLWIRE_REQUIRE_ENGINES", raising=False)
    with pytest.raises(pytest.skip.Exception, match="scripts/ensure_engines installs it"):
        engine("nosuchengine")
