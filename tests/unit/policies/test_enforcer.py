"""PolicyEnforcer from several threads at once (replicas' tables, a reload beside a change)."""

from __future__ import annotations

import os
import subprocess
import sys

# In a process of its own: the collector's thresholds and the switch interval are set for the
# whole interpreter, and so that no other test's threads or garbage change the odds.
_ASK_FROM_THREADS = """
import gc, sys, threading, time
from policies.enforcer import PolicyEnforcer
from policies.policy import Assignment, Grant, Policy

policy = Policy(
    version=1,
    grants=frozenset({Grant(role="analyst", domain="*", pattern="demo-*", action="chat")}),
    assignments=frozenset({Assignment(member="user:a", role="analyst", domain="*")}),
)

class SwitchOnCollect:
    # A finaliser lets another thread run while the collector is under way, as any __del__ can:
    # that is how a second ast.parse lands in the middle of one.
    def __del__(self):
        time.sleep(0)

errors, answers = [], []

def ask():
    enforcer = PolicyEnforcer(policy)
    for _ in range(3000):
        garbage = SwitchOnCollect()
        garbage.cycle = garbage
        try:
            answers.append(enforcer.enforce("user:a", "t1", "demo-chat", "chat"))
        except SystemError as exc:
            errors.append(exc)
            return

gc.set_threshold(50, 1, 1)
sys.setswitchinterval(1e-6)
threads = [threading.Thread(target=ask) for _ in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(len(errors), len(answers), all(answers), errors[:1])
"""


def test_questions_from_several_threads_at_once_all_get_answers() -> None:
    """casbin parses its matcher with ``ast.parse`` on every question; CPython's AST constructor
    keeps its recursion depth per interpreter, so two threads parsing at once failed one with
    ``SystemError: AST constructor recursion depth mismatch`` (CI: two replicas opened at once).
    Without the lock this failed in 5 of 5 runs."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-c", _ASK_FROM_THREADS], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[:3] == ["0", "12000", "True"], done.stdout
