"""The demo entry point turns expected errors into one clear line and exit code 2."""
from __future__ import annotations

import pytest

from flows.release_pipeline import main


def test_bad_spec_path_is_a_clear_error_not_a_traceback(capsys, dpr_home):
    with pytest.raises(SystemExit) as exc:
        main(["--spec", "does/not/exist.yaml"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "spec file not found: does/not/exist.yaml" in err and "Traceback" not in err
