"""end_process ends a process as Python's exit would, without hanging on threads Python's exit would stop."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import atexit, concurrent.futures, sys
from zerokit.foundations.process_end import end_process

pool = concurrent.futures.ThreadPoolExecutor(2)  # never shut down, as torch.compile's inductor leaves its own
assert pool.submit(lambda: 6 * 7).result() == 42
atexit.register(lambda: print("atexit ran", flush=True))
print("buffered", end="")
end_process(3)
"""


def test_a_process_with_an_idle_thread_pool_ends_with_its_code_and_its_output():
    """Before, end_process joined the pool's worker threads, which wait for work until Python's exit tells
    them to stop: a run with --compile torch trained, then hung at exit."""
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60)
    assert done.returncode == 3, done.stderr
    assert done.stdout == "bufferedatexit ran\n"
