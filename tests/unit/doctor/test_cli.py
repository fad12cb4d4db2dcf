"""The command line: a healthy environment passes --strict, fast; output formats; exit codes; no torch at import."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from tests.unit.doctor.conftest import REPO, failures, run_doctor, run_main
from zerokit.doctor import CHECKS, check_id
from zerokit.doctor.cli import exit_code, main
from zerokit.doctor.result import CheckResult
from zerokit.image.stack import StackError


def test_healthy_environment_passes_strict_in_well_under_ten_seconds(environ):
    started = time.monotonic()
    result = run_doctor(["--strict"], environ)
    elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stdout + result.stderr
    assert "fail" not in [line.split("│")[2].strip() for line in result.stdout.splitlines() if line.count("│") > 3]
    assert "doctor: " in result.stdout and " 0 fail" in result.stdout
    assert elapsed < 10, f"doctor took {elapsed:.1f} s"


def test_json_is_the_same_rows_as_data(environ):
    result = run_doctor(["--json"], environ)
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)  # nothing else on stdout: DeepSpeed's log lines go to stderr
    assert {tuple(row) for row in rows} == {("name", "status", "detail", "fix")}
    names = [row["name"] for row in rows]
    assert names[:2] == ["version: python", "version: torch"]
    assert "/dev/shm" in names and "op: cpu_adam" in names
    assert failures(rows) == []


def test_strict_warn_also_fails_on_a_warning(environ, capsys):
    only_caches = [arg for c in CHECKS if check_id(c) != "caches" for arg in ("--skip", check_id(c))]
    assert run_main([*only_caches, "--strict=warn"], environ, capsys)[0] == 0
    del environ["TORCH_EXTENSIONS_DIR"]  # unset: a warning (the default cache every environment shares)
    code, rows = run_main([*only_caches, "--strict"], environ, capsys)
    assert code == 0
    assert [row["status"] for row in rows if row["name"] == "cache: TORCH_EXTENSIONS_DIR"] == ["warn"]
    assert run_main([*only_caches, "--strict=warn"], environ, capsys)[0] == 1


def test_without_strict_a_fail_still_exits_zero(environ, capsys):
    code, rows = run_main(["--ifname", "nosuch0"], environ, capsys)
    assert failures(rows) == ["network: --ifname"]
    assert code == 0
    assert run_main(["--ifname", "nosuch0", "--strict"], environ, capsys)[0] == 1


def test_exit_codes():
    rows = [CheckResult("a", "ok", ""), CheckResult("b", "warn", "", "fix b")]
    assert [exit_code(rows, strict) for strict in (None, "fail", "warn")] == [0, 0, 1]
    rows.append(CheckResult("c", "fail", "", "fix c"))
    assert [exit_code(rows, strict) for strict in (None, "fail", "warn")] == [0, 1, 1]


def test_table_shows_check_status_detail_and_fix(environ, capsys):
    environ["COLUMNS"] = "400"  # one line per row, so the fix text is not wrapped
    code = main(["--ifname", "nosuch0", "--skip", "ops", "--skip", "gpu"], environ)
    out = capsys.readouterr().out
    assert code == 0
    header = next(line for line in out.splitlines() if "check" in line and "status" in line)
    assert [cell.strip() for cell in header.strip("┃ ").split("┃")] == ["check", "status", "detail", "fix"]
    row = next(line for line in out.splitlines() if "network: --ifname" in line)
    assert "fail" in row and "no interface nosuch0" in row and "--ifname IF" in row
    assert "op: cpu_adam" not in out  # skipped


def test_skip_refuses_an_unknown_check(environ, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--skip", "nonsense"], environ)
    assert exit_info.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


def test_unknown_stack_is_a_user_error_naming_the_known_ones(environ):
    result = run_doctor(["--stack", "nosuchstack"], environ)
    assert result.returncode == 2
    assert "no stack 'nosuchstack': pick one of cpu" in result.stderr


def test_stack_defaults_to_zerokit_stack(environ):
    environ["ZEROKIT_STACK"] = "nosuchstack"
    with pytest.raises(StackError, match="no stack 'nosuchstack'"):
        main([], environ)


def test_every_check_has_a_unique_id():
    ids = [check_id(c) for c in CHECKS]
    assert len(ids) == len(set(ids))
    assert {"shm", "ops", "packages", "interface", "hub", "caches", "gpu"} <= set(ids)


def test_doctor_is_on_the_command_table():
    result = subprocess.run(
        [sys.executable, "-m", "zerokit", "--help"],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(REPO / "src")},
        cwd=REPO,
    )
    assert "doctor     preflight checks: fail loudly and name the fix" in result.stdout


def test_importing_the_cli_does_not_import_torch():
    code = "import sys, zerokit.doctor.cli; print(sorted({'torch', 'deepspeed'} & set(sys.modules)))"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={"PYTHONPATH": str(REPO / "src")}, cwd=REPO
    )
    assert result.stdout.strip() == "[]", result.stderr
