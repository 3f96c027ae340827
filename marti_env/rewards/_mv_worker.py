"""Helper process for :class:`marti_env.rewards.MathVerifier`: runs math-verify.

Started by the parent as ``python -u <this file>`` (a plain script, so it does not need
``marti_env`` to be importable); imports only the standard library and ``math_verify``.

Protocol (one JSON document per line, ASCII):
    parent → worker: ``[request_id, pred, gold, budget_s]``
    worker → parent: ``["ready", null]`` once after start-up, or ``["import-error", msg]``;
                     then ``[request_id, result]`` per request, where ``result`` is
                     ``true``, ``false``, ``"timeout"`` or ``"error"``.

Each request runs ``parse(\\boxed{gold})``, ``parse(\\boxed{pred})`` and ``verify`` under
one ``budget_s`` wall-clock budget enforced with ``setitimer``: the handler raises a
``BaseException`` subclass, so math-verify's and sympy's ``except Exception`` blocks cannot
swallow it, and the timer re-fires every 50 ms until disarmed in case one is swallowed
anyway. Work the signal cannot interrupt (a long C-level big-integer operation) is bounded
by the parent, which kills this process after its own deadline. The worker ignores SIGINT
and SIGTERM and exits when its standard input closes (the parent exited or dropped it).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys


class _Budget(BaseException):
    """Raised by the SIGALRM handler when a request's budget is spent."""


_armed = False


def _on_alarm(signum, frame):
    if _armed:
        raise _Budget


def _disarm() -> None:
    global _armed
    _armed = False
    signal.setitimer(signal.ITIMER_REAL, 0.0, 0.0)


def _limit_memory(limit_mb: int) -> None:
    try:
        import resource

        limit = limit_mb * 1024 * 1024
        _soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    except Exception:  # not fatal: the parent's deadline still bounds time
        pass


def main() -> None:
    global _armed
    # The protocol gets a private copy of stdout; anything a library prints goes to stderr
    # (the parent discards it) instead of corrupting the protocol.
    out = os.fdopen(os.dup(sys.stdout.fileno()), "w", encoding="ascii")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    sys.stdout = sys.stderr
    memory_mb = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    try:
        # The parent decides when we stop: a Ctrl-C or a SIGTERM sent to the whole process
        # group (a terminal, a batch scheduler) lets the parent finish its step with us; we
        # exit when it closes our stdin.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        logging.getLogger("math_verify").setLevel(logging.CRITICAL + 1)
        logging.getLogger("latex2sympy2_extended").setLevel(logging.CRITICAL + 1)
        from math_verify import parse, verify
    except BaseException as exc:
        out.write(json.dumps(["import-error", f"{type(exc).__name__}: {exc}"]) + "\n")
        out.flush()
        return
    if memory_mb > 0:
        _limit_memory(memory_mb)
    signal.signal(signal.SIGALRM, _on_alarm)
    out.write(json.dumps(["ready", None]) + "\n")
    out.flush()

    def check(pred: str, gold: str) -> bool:
        # Timeouts disabled in math-verify (they would re-arm SIGALRM); our timer bounds
        # the whole request instead.
        gold_parsed = parse("\\boxed{" + gold + "}", parsing_timeout=None)
        if not gold_parsed:
            return False
        pred_parsed = parse("\\boxed{" + pred + "}", parsing_timeout=None)
        if not pred_parsed:
            return False
        return bool(verify(gold_parsed, pred_parsed, timeout_seconds=None))

    for line in sys.stdin:
        request_id = None
        result: object = "error"
        try:
            try:
                request_id, pred, gold, budget = json.loads(line)
                _armed = True
                signal.setitimer(signal.ITIMER_REAL, max(float(budget), 0.001), 0.05)
                try:
                    result = check(str(pred), str(gold))
                finally:
                    _disarm()
            except _Budget:
                _disarm()
                result = "timeout"
            except Exception:
                _disarm()
                result = "error"
        except _Budget:  # the timer fired again while we were handling the first one
            _disarm()
            result = "timeout"
        out.write(json.dumps([request_id, result]) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
