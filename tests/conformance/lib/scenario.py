"""scenario.py — tiny helpers for Python conformance scenarios (stdlib only).

Owns the scenario verdict protocol shared with run.py: a scenario prints `PASS <summary>` and
exits 0, or prints `FAIL: <reason>` and exits 1, or prints `SKIP: <reason>` and exits 77 (the
behaviour is not there to test). `run(body)` does that for a function body; `check(cond, msg)`
fails it, `skip(reason)` skips it. A watchdog thread ends the process if the body hangs (a C++ client
call that never returns must not outlive the runner's timeout silently).
"""

from __future__ import annotations

import os
import sys
import threading
import traceback
from typing import Callable, List, Optional


class CheckFailed(AssertionError):
    pass


class SkipScenario(Exception):
    pass


SKIP_EXIT = 77


def skip(reason: str) -> None:
    raise SkipScenario(reason)


def check(cond: object, msg: str) -> None:
    if not cond:
        raise CheckFailed(msg)


def env(name: str) -> str:
    v = os.environ.get(name)
    if not v:
        raise CheckFailed(f"environment variable {name} is not set (run through tests/conformance/run.py)")
    return v


def run(body: Callable[[List[Callable[[], None]]], Optional[str]], timeout: float = 50.0) -> None:
    """Run body(cleanups); cleanups run afterwards in reverse order. Exits the process."""
    cleanups: List[Callable[[], None]] = []

    def watchdog() -> None:
        print(f"FAIL: scenario body did not finish within {timeout:.0f}s", flush=True)
        os._exit(1)

    t = threading.Timer(timeout, watchdog)
    t.daemon = True
    t.start()
    code = 0
    try:
        summary = body(cleanups)
        msg = f"PASS {summary or ''}".strip()
    except CheckFailed as e:
        msg, code = f"FAIL: {e}", 1
    except SkipScenario as e:
        msg, code = f"SKIP: {e}", SKIP_EXIT
    except Exception as e:  # a client exception is a failure with its text
        traceback.print_exc()
        msg, code = f"FAIL: {type(e).__name__}: {e}", 1
    for c in reversed(cleanups):
        try:
            c()
        except Exception as e:
            print(f"cleanup error: {e!r}", flush=True)
    t.cancel()
    print(msg, flush=True)
    sys.stdout.flush()
    # os._exit: the C++ core's background threads must not keep the process alive or crash it
    # during interpreter teardown.
    os._exit(code)
