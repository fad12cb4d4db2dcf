"""The ranks' program is checked before any rank starts, with a shell's exit codes (127, 126)."""

from __future__ import annotations

import pytest

from zerokit.launch.command import Command
from zerokit.launch.job import read_job
from zerokit.launch.program import NOT_EXECUTABLE, NOT_FOUND, CannotRun, check_commands, check_program


def executable(path):
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


def test_a_name_is_looked_up_in_the_search_path(tmp_path):
    executable(tmp_path / "tool")
    check_program("tool", str(tmp_path))
    with pytest.raises(CannotRun) as raised:
        check_program("tool", "/nowhere")
    assert raised.value.exit_code == NOT_FOUND
    assert str(raised.value) == (
        "command not found: tool (searched PATH=/nowhere): check the spelling, install it, or give its full path"
    )


def test_a_path_must_be_an_executable_file(tmp_path):
    script = tmp_path / "job.sh"
    with pytest.raises(CannotRun, match=f"no such file: {script}: check the path") as raised:
        check_program(str(script), "/usr/bin")
    assert raised.value.exit_code == NOT_FOUND
    script.write_text("#!/bin/sh\n")
    for not_executable in (script, tmp_path):  # a plain file, a folder
        with pytest.raises(CannotRun, match="is not an executable file") as raised:
            check_program(str(not_executable), "/usr/bin")
        assert raised.value.exit_code == NOT_EXECUTABLE
    check_program(str(executable(script)), "/usr/bin")


def test_each_command_is_looked_up_in_its_own_environment(tmp_path):
    executable(tmp_path / "tool")
    check_commands([Command(("tool",), {"PATH": str(tmp_path)})], read_job(("tool",), {}), {"PATH": "/nowhere"})
    with pytest.raises(CannotRun):
        check_commands([Command(("tool",), {})], read_job(("tool",), {}), {"PATH": "/nowhere"})
