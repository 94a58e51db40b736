"""What every command-line test checks of a user error: exit status 2, exactly one line on
stderr, ``error: ...`` naming the given fragments, no traceback anywhere."""

from __future__ import annotations


def assert_user_error(result, *fragments: str) -> str:
    """Exit status 2, exactly one line on stderr, ``error: ...`` naming the fragments; the line."""
    assert result.exit_code == 2, (result.stdout, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    assert "Traceback" not in result.stderr + result.stdout
    return lines[0]
