"""MathVerifier: equivalence tables, data formats, hostile input, threads, processes, cache.

The helper process starts once per verifier (about 1-2 s), so the tests share a few
module-scoped verifiers.
"""

from __future__ import annotations

import ast
import json
import multiprocessing
import pickle
import random
import signal
import subprocess
import sys
import textwrap
import threading
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

from marti_env.rewards import MathVerifier, default_verifier
from marti_env.rewards import math_verifier as mv_module


@pytest.fixture(scope="module")
def verifier():
    v = MathVerifier()
    yield v
    v.close()


@pytest.fixture(scope="module")
def uncached():
    """No cache: every slow-path call really goes to math-verify."""
    v = MathVerifier(cache_size=0)
    yield v
    v.close()


@pytest.fixture(scope="module")
def hostile_verifier():
    """A short budget and no length cap, so hostile inputs reach math-verify and time out."""
    v = MathVerifier(timeout_s=1.0, cache_size=0, max_answer_chars=200_000)
    yield v
    v.close()


EQUIVALENCE_TABLE = [
    # (pred, gold, expected). Numbers: exact, no math-verify.
    ("142", "142.0", True),  # AMC golds are JSON floats
    ("142.0", "142", True),
    ("141", "142.0", False),
    ("-4", "-4.0", True),
    ("1234", "1,234", True),  # GSM8K golds have thousands separators
    ("1,234", "1234", True),
    ("0.5", r"\frac{1}{2}", True),
    (r"\dfrac12", "0.5", True),
    ("-7/2", "-3.50", True),
    ("1/3", "0.333333", False),  # exact: math-verify's rounding would accept this
    ("2", "2.0000001", False),
    ("10,\\!000", "10000", True),
    # Canonical strings equal.
    ("(3,-1)", "(3, -1)", True),
    (r"\left( 3, -1 \right)", "(3, -1)", True),
    ("C", r"\text{(C)}", True),
    ("(C)", r"\text{(C)}", True),
    (r"45^\circ", "45", True),
    ("[2,5)", "[2, 5)", True),
    # math-verify decides.
    (r"\frac{\sqrt 3}{2}", r"\frac{\sqrt{3}}{2}", True),
    (r"\sqrt{3}/2", r"\frac{\sqrt{3}}{2}", True),
    (r"\frac{1}{2}\sqrt{3}", r"\frac{\sqrt{3}}{2}", True),
    (r"\frac{\sqrt{2}}{2}", r"\frac{\sqrt{3}}{2}", False),
    (r"2\sqrt{2}", r"\sqrt{8}", True),
    (r"3\sqrt{2}", r"\sqrt{8}", False),
    ("(-1, 3)", "(3, -1)", False),
    ("(3, 1)", "(3, -1)", False),
    (r"\textbf{(C)}", r"\text{(C)}", True),
    ("D", r"\text{(C)}", False),
    ("1 + x^2", "x^2+1", True),
    ("x^2+2", "x^2+1", False),
    ("[2, 5]", "[2, 5)", False),
    (r"(-\infty,3]", r"(-\infty, 3]", True),
    (r"(-\infty, 3)", r"(-\infty, 3]", False),
    (r"(3,\infty)\cup(-\infty,-2)", r"(-\infty, -2) \cup (3, \infty)", True),
    (r"\{2, 1\}", r"\{1,2\}", True),
    (r"\pi", "3.14159", False),
    ("10", r"10\%", True),
    ("x = 5", "5", True),
    (r"\begin{pmatrix}1\\2\end{pmatrix}", r"\begin{pmatrix} 1 \\ 2 \end{pmatrix}", True),
    (r"\frac{14}{3}", r"\frac{14}{3}", True),
    ("6-5i", "6 - 5i", True),
    ("6+5i", "6 - 5i", False),
    # No answer.
    ("", "5", False),
    ("5", "", False),
]


@pytest.mark.parametrize(("pred", "gold", "expected"), EQUIVALENCE_TABLE)
def test_equivalence_table(verifier, pred: str, gold: str, expected: bool) -> None:
    assert verifier.equivalent(pred, gold) is expected


SCORE_TABLE = [
    # (response, gold, expected)
    (r"The total is $\boxed{142}$.", "142.0", 1.0),
    (r"Thus \boxed{1,234} dollars.", "1234", 1.0),
    (r"\boxed{1234}", "1,234", 1.0),
    (r"First \boxed{3}, no wait: \boxed{4}", "4", 1.0),
    (r"First \boxed{4}, no wait: \boxed{3}", "4", 0.0),
    (r"\boxed{\frac{\sqrt{3}}{2}}", r"\frac{\sqrt3}{2}", 1.0),
    ("The answer is 142", "142.0", 0.0),  # unboxed: no answer
    (r"\boxed{}", "0", 0.0),
    (r"\boxed{142", "142", 0.0),
    (r"\boxed{142}", None, 0.0),
]


@pytest.mark.parametrize(("response", "gold", "expected"), SCORE_TABLE)
def test_score_table(verifier, response: str, gold: str | None, expected: float) -> None:
    assert verifier.score(response, gold) == expected


def test_amc_golds(verifier, data_file) -> None:
    rows = json.loads(data_file("amc").read_text())
    assert len(rows) == 83
    for row in rows:
        gold = str(row["answer"])  # e.g. "142.0", as Task.from_dict makes it
        value = int(float(row["answer"]))
        assert verifier.score(f"so \\boxed{{{value}}}", gold) == 1.0, row["id"]
        assert verifier.score(f"so \\boxed{{{value + 1}}}", gold) == 0.0, row["id"]


def test_gsm8k_golds(verifier, data_file) -> None:
    seen_commas = 0
    with open(data_file("gsm8k/test")) as f:
        for line in f:
            gold = json.loads(line)["answer"].split("####")[-1].strip()
            plain = gold.replace(",", "")
            seen_commas += "," in gold
            assert verifier.score(f"\\boxed{{{plain}}}", gold) == 1.0, gold
            assert verifier.score(f"\\boxed{{{int(plain) + 1:,}}}", gold) == 0.0, gold
    assert seen_commas > 10


def test_type_errors(verifier) -> None:
    with pytest.raises(TypeError):
        verifier.equivalent(5, "5")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        verifier.score(None, "5")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "kwargs",
    [{"timeout_s": 0}, {"timeout_s": float("inf")}, {"cache_size": -1}, {"max_answer_chars": -1}],
)
def test_bad_settings(kwargs) -> None:
    with pytest.raises(ValueError):
        MathVerifier(**kwargs)


# -- hostile input ----------------------------------------------------------------------


def _hostile_responses() -> list[tuple[str, str, float]]:
    rng = random.Random(0)
    noise = "".join(rng.choice("0123456789+-*/^{}()\\abcxyz =.,") for _ in range(100_000))
    digits = " ".join(str(rng.randrange(10)) for _ in range(50_000))
    raw = bytes(rng.getrandbits(8) for _ in range(100_000)).decode("utf-8", errors="replace")
    nested = r"\frac{1}{" * 3_000 + "2" + "}" * 3_000  # ~30 KB
    return [
        ("\\boxed{" + nested + "}", "2", 0.0),
        (r"\boxed{9^{9^{9^9}}}", "2", 0.0),
        (r"\boxed{100000000!}", "5", 0.0),
        (r"\boxed{9^{9^9} - 9^{9^9}}", "0", 0.0),
        (noise, "2", 0.0),  # math-verify alone "finds" a 2 in unboxed noise
        (digits, "2", 0.0),
        (raw, "2", 0.0),
        ("\\boxed{" + raw[:5_000] + "}", "2", 0.0),
        ("∑∫√π≈≠ \ud800 \U0010ffff", "2", 0.0),
        ("\\boxed{\ud800}", "\ud800", 1.0),  # equal strings, even unpaired surrogates
        ("\\boxed{\ud800 x}", "y \ud800", 0.0),  # through the helper's JSON pipe
        ("", "2", 0.0),
        ("", "", 0.0),
        (noise + r" so \boxed{2}", "2", 1.0),
        (raw + r"\boxed{\frac{1}{2}}", "0.5", 1.0),
    ]


@pytest.mark.timeout(120)
def test_hostile_inputs_are_screened_before_math_verify(hostile_verifier) -> None:
    """The towers, the factorial and the 3,000-deep fraction never reach math-verify."""
    before = hostile_verifier.rejections()
    for response, gold, expected in _hostile_responses():
        assert hostile_verifier.score(response, gold) == expected, response[:40]
    info = hostile_verifier.cache_info()
    assert info.timeouts == 0 and info.helper_restarts == 0
    after = hostile_verifier.rejections()
    fired = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    # 9^{9^{9^9}} and 9^{9^9} - 9^{9^9}: power; 100000000!: factorial; \frac{1}{ x3000: nesting
    assert fired["power"] == 2 and fired["factorial"] == 1 and fired["nesting"] >= 1, fired


@pytest.mark.timeout(120)
def test_hostile_inputs_main_thread_without_screen(hostile_verifier, monkeypatch) -> None:
    """Second line of defence: with the screen off, the budget and the kill still bound them."""
    monkeypatch.setattr(mv_module, "screen_answer", lambda answer, **bounds: None)
    for response, gold, expected in _hostile_responses():
        assert hostile_verifier.score(response, gold) == expected, response[:40]
    assert hostile_verifier.cache_info().timeouts >= 3  # the towers really hit the budget


@pytest.mark.timeout(120)
def test_hostile_inputs_rejected_by_length_without_parsing() -> None:
    v = MathVerifier()  # default max_answer_chars=1000
    nested = r"\frac{1}{" * 3_000 + "2" + "}" * 3_000
    assert v.score("\\boxed{" + nested + "}", "2") == 0.0
    assert v.equivalent("1" * 1001, "1" * 1001) is False
    assert v.equivalent("1", "1" * 1001) is False  # an overlong gold is rejected too
    assert v._helper is None  # never needed the helper
    assert v.cache_info().rejected == 3 and v.rejections() == {"length": 3}


def test_rejections_are_cached_and_counted_each_time() -> None:
    v = MathVerifier(cache_size=10)
    for _ in range(3):
        assert v.equivalent(r"9^{9^{9^9}}", "2") is False
    info = v.cache_info()
    # one screen run, then two cache hits; every call counts as rejected
    assert (info.hits, info.misses, info.currsize, info.rejected) == (2, 0, 1, 3)
    assert v.rejections() == {"power": 3}
    assert v._helper is None
    v.cache_clear()  # empties the cache, keeps the event counters (like timeouts)
    assert v.cache_info().rejected == 3 and v.cache_info().currsize == 0


def test_fast_path_answers_never_reach_the_screen(monkeypatch) -> None:
    """Equal canonical forms and plain numbers are settled before the screen and the cache."""
    calls: list[str] = []

    def spy(answer: str, **bounds: int) -> None:
        calls.append(answer)

    monkeypatch.setattr(mv_module, "screen_answer", spy)
    v = MathVerifier()
    assert v.equivalent("10^{100000}", "10^{100000}") is True  # equal strings: no parsing
    assert v.equivalent("1,000", "1000.0") is True
    assert calls == [] and v.cache_info().currsize == 0


@pytest.mark.timeout(120)
def test_hostile_equivalent_never_raises(hostile_verifier) -> None:
    rng = random.Random(2)
    alphabet = "0123456789+-*/^_{}()[]\\abfrcstxyz =.,!|&%$#"
    for _ in range(10):
        pred = "".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 300)))
        assert hostile_verifier.equivalent(pred, r"\frac{1}{2}") in (True, False)


def test_outer_alarm_is_not_cancelled(uncached) -> None:
    """math-verify's in-process timeouts cancel any SIGALRM timer; the helper must not."""

    def handler(signum, frame):
        pass

    old = signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, 100.0)
    try:
        assert uncached.equivalent(r"2\sqrt{2}", r"\sqrt{8}") is True
        remaining, _ = signal.getitimer(signal.ITIMER_REAL)
        assert remaining > 0  # still armed
        assert signal.getsignal(signal.SIGALRM) is handler
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


# -- threads and processes --------------------------------------------------------------

THREAD_TABLE = [
    (r"\boxed{2\sqrt{2}}", r"\sqrt{8}"),
    (r"\boxed{x^2 + 1}", "1 + x^2"),
    (r"\boxed{(-1, 3)}", "(3, -1)"),
    (r"\boxed{142}", "142.0"),
    (r"\boxed{9^{9^{9^9}}}", "3"),
]
THREAD_EXPECTED = [1.0, 1.0, 0.0, 1.0, 0.0]


@pytest.mark.timeout(120)
def test_off_main_thread_same_scores() -> None:
    # math-verify's own timeouts raise ValueError off the main thread.
    v = MathVerifier(timeout_s=3.0, cache_size=0)  # 3 s: legit checks on a busy machine
    results: list[float] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            results.extend(v.score(r, g) for r, g in THREAD_TABLE)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    assert not errors
    assert results == THREAD_EXPECTED
    assert [v.score(r, g) for r, g in THREAD_TABLE] == THREAD_EXPECTED
    v.close()


@pytest.mark.timeout(120)
def test_many_threads_share_one_verifier(uncached) -> None:
    pairs = [(rf"\boxed{{{k}\sqrt{{2}}}}", rf"\sqrt{{{2 * k * k}}}") for k in range(2, 8)]
    out: dict[int, float] = {}

    def work(i: int) -> None:
        out[i] = uncached.score(*pairs[i])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(pairs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert out == dict.fromkeys(range(len(pairs)), 1.0)


@pytest.mark.timeout(300)
def test_spawned_worker_process_same_scores() -> None:
    v = MathVerifier(timeout_s=3.0, cache_size=0)  # 3 s: legit checks on a busy machine
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=ctx) as pool:
        # v.score pickles the verifier (config only) into the worker.
        futures = [pool.submit(v.score, r, g) for r, g in THREAD_TABLE]
        assert [f.result() for f in futures] == THREAD_EXPECTED


_FORKED: dict[str, MathVerifier] = {}


def _score_in_fork(response: str, gold: str) -> tuple[float, int | None]:
    v = _FORKED["v"]  # inherited through fork, not pickled
    score = v.score(response, gold)
    return score, None if v._helper is None else v._helper.proc.pid


@pytest.mark.timeout(300)
@pytest.mark.skipif(sys.platform == "win32", reason="needs fork")
def test_forked_worker_starts_its_own_helper() -> None:
    v = _FORKED["v"] = MathVerifier(timeout_s=3.0, cache_size=0)
    assert v.equivalent(r"2\sqrt{2}", r"\sqrt{8}") is True  # the parent's helper is up
    parent_helper_pid = v._helper.proc.pid
    ctx = multiprocessing.get_context("fork")
    try:
        with ProcessPoolExecutor(max_workers=1, mp_context=ctx) as pool:
            futures = [pool.submit(_score_in_fork, r, g) for r, g in THREAD_TABLE]
            results = [f.result() for f in futures]
        assert [score for score, _ in results] == THREAD_EXPECTED
        child_helper_pids = {pid for _, pid in results if pid is not None}
        assert child_helper_pids and parent_helper_pid not in child_helper_pids
        # The parent's helper is untouched and still answers.
        assert v._helper.proc.pid == parent_helper_pid
        assert v.score(r"\boxed{x^2 + 1}", "1 + x^2") == 1.0
    finally:
        _FORKED.clear()
        v.close()


def test_pickle_round_trip(verifier) -> None:
    verifier.equivalent(r"2\sqrt{2}", r"\sqrt{8}")  # fill the cache, start the helper
    v = MathVerifier(timeout_s=3.0, cache_size=10, max_answer_chars=50, kill_grace_s=1.5)
    v.equivalent(r"2\sqrt{2}", r"\sqrt{8}")
    clone = pickle.loads(pickle.dumps(v))
    assert (clone.timeout_s, clone.cache_size, clone.max_answer_chars, clone.kill_grace_s) == (
        3.0,
        10,
        50,
        1.5,
    )
    assert clone._helper is None
    assert clone.cache_info().currsize == 0
    assert clone.score(r"\boxed{2\sqrt{2}}", r"\sqrt{8}") == 1.0
    assert clone.equivalent("1" * 51, "1" * 51) is False  # max_answer_chars travelled
    v.close()
    clone.close()


# -- cache ------------------------------------------------------------------------------


def test_cache_hits_and_misses(verifier) -> None:
    verifier.cache_clear()
    assert verifier.equivalent(r"\sqrt{3}/2", r"\frac{\sqrt{3}}{2}") is True
    assert verifier.equivalent(r"\sqrt{3}/2", r"\frac{\sqrt{3}}{2}") is True
    assert verifier.equivalent(r"\sqrt{2}/2", r"\frac{\sqrt{3}}{2}") is False
    assert verifier.equivalent(r"\sqrt{2}/2", r"\frac{\sqrt{3}}{2}") is False  # cached False
    info = verifier.cache_info()
    assert (info.hits, info.misses, info.currsize) == (2, 2, 2)
    verifier.equivalent("12", "12.0")  # fast path: no cache traffic
    assert verifier.cache_info()[:4] == info[:4]


def test_cache_evicts_least_recently_used() -> None:
    v = MathVerifier(cache_size=2)
    a, b, c = (r"\sqrt{3}", r"3^{1/2}"), (r"x+1", "1+x"), (r"2\sqrt2", r"\sqrt8")
    for pair in (a, b, a, c):  # b is now least recently used and gets evicted
        v.equivalent(*pair)
    info = v.cache_info()
    assert (info.hits, info.misses, info.currsize) == (1, 3, 2)
    v.equivalent(*a)
    v.equivalent(*b)
    assert v.cache_info()[:2] == (2, 4)
    v.close()


def test_default_verifier_is_shared() -> None:
    assert default_verifier() is default_verifier()
    assert isinstance(default_verifier(), MathVerifier)


# -- helper failures --------------------------------------------------------------------


def _fake_worker(tmp_path: Path, body: str) -> str:
    path = tmp_path / "fake_worker.py"
    path.write_text(textwrap.dedent(body))
    return str(path)


@pytest.mark.timeout(120)
def test_hung_helper_is_killed_and_replaced(tmp_path, monkeypatch) -> None:
    """A helper stuck where no signal reaches (simulated) is killed after the deadline."""
    worker = _fake_worker(
        tmp_path,
        """
        import sys, time
        print('["ready", null]', flush=True)
        for line in sys.stdin:
            time.sleep(3600)  # never answers
        """,
    )
    monkeypatch.setattr(mv_module, "_WORKER_PATH", worker)
    v = MathVerifier(timeout_s=0.2, kill_grace_s=0.3)
    assert v.equivalent(r"2\sqrt{2}", r"\sqrt{8}") is False
    replacement = v._helper
    info = v.cache_info()
    assert (info.timeouts, info.helper_restarts) == (1, 1)
    assert replacement is not None and replacement.alive()  # already started
    assert v.score(r"\boxed{x+1}", "1+x") == 0.0
    assert v.cache_info().helper_restarts == 2
    assert not replacement.alive()  # hung too, so it was killed as well
    v.close()


@pytest.mark.timeout(120)
def test_dead_helper_counts_as_not_equivalent(tmp_path, monkeypatch) -> None:
    worker = _fake_worker(
        tmp_path,
        """
        import sys
        print('["ready", null]', flush=True)
        sys.stdin.readline()
        sys.exit(1)  # crashes on the first request
        """,
    )
    monkeypatch.setattr(mv_module, "_WORKER_PATH", worker)
    v = MathVerifier(timeout_s=5.0)
    assert v.equivalent(r"2\sqrt{2}", r"\sqrt{8}") is False
    assert v.cache_info().helper_restarts == 1
    v.close()


def test_helper_that_cannot_import_math_verify_raises(tmp_path, monkeypatch) -> None:
    worker = _fake_worker(
        tmp_path,
        """
        print('["import-error", "ModuleNotFoundError: No module named math_verify"]')
        """,
    )
    monkeypatch.setattr(mv_module, "_WORKER_PATH", worker)
    v = MathVerifier()
    with pytest.raises(RuntimeError, match="No module named math_verify"):
        v.equivalent(r"2\sqrt{2}", r"\sqrt{8}")
    assert v.equivalent("2", "2.0") is True  # the fast path does not need the helper


def test_import_stays_light() -> None:
    code = (
        "import sys, marti_env.rewards\n"
        "heavy = ['math_verify', 'sympy', 'torch', 'transformers', 'vllm', 'deepspeed', 'ray']\n"
        "print([m for m in heavy if m in sys.modules])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    loaded = ast.literal_eval(out.stdout.strip())
    assert "math_verify" not in loaded and "torch" not in loaded, loaded
