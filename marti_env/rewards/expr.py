"""The expression verifier: an expression's hidden-test pass fraction, by the safe evaluator.

``reward="expr"`` makes every workflow run on :class:`~marti_env.tasks.expr.ExprTask`\\ s:

* a turn's answer is the expression in its response
  (:func:`~marti_env.tasks.expr.extract_expr`: the last ``\\boxed{...}``, else the first
  line of the last code block);
* a turn's score is the expression's pass fraction on the task's hidden tests
  (:func:`~marti_env.tasks.expr.pass_fraction`; evaluated by walking its syntax tree, never
  ``eval``);
* the episode's outcome is 1.0 when the team's final expression passes every test;
* majority votes group expressions by their values on the hidden tests (an error counts as
  its own value), so ``2 * x`` and ``x + x`` vote together.

A malformed or hostile expression scores 0; nothing here raises on what a model wrote.
"""

from __future__ import annotations

import json

from marti_env.tasks.expr import ExprTask, evaluate_all, extract_expr, pass_fraction
from marti_env.tasks.task import Task

__all__ = ["ExprReward", "expr_reward"]


class ExprReward:
    """Score a response to an expression task on its hidden tests (an :class:`AnswerRule`
    of :mod:`marti_env.rewards.code`'s protocol).

    Raises (from :meth:`score` and the rule's methods):
        ValueError: the task is not an :class:`~marti_env.tasks.expr.ExprTask` (named).
    """

    def __repr__(self) -> str:
        return "ExprReward()"

    def score(self, task: Task, response: str) -> float:
        """The pass fraction of the response's expression (0.0 when it has none)."""
        expr_task = _expr_task(task)
        answer = extract_expr(response)
        return 0.0 if answer is None else pass_fraction(expr_task.tests, answer)

    def extract_answer(self, response: str) -> str | None:
        """The expression in ``response`` (see :func:`~marti_env.tasks.expr.extract_expr`)."""
        return extract_expr(response)

    def score_answer(self, task: Task, answer: str) -> float:
        """1.0 when expression ``answer`` passes every hidden test, else 0.0."""
        return 1.0 if pass_fraction(_expr_task(task).tests, answer) == 1.0 else 0.0

    def answer_key(self, task: Task, answer: str) -> str:
        """The expression's values on the hidden inputs, as a string (``"error"`` where
        it fails to evaluate): equal for expressions that behave alike on the tests."""
        inputs = [x for x, _ in _expr_task(task).tests]
        values = [v if err is None else "error" for v, err in evaluate_all(answer, inputs)]
        return json.dumps(values)


def expr_reward() -> ExprReward:
    """The ``"expr"`` reward of :func:`~marti_env.rewards.make_reward` (no options)."""
    return ExprReward()


def _expr_task(task: Task) -> ExprTask:
    if not isinstance(task, ExprTask):
        raise ValueError(
            f"the expr reward needs expression tasks, and task {task.id!r} is a "
            f"{type(task).__name__}; use tasks='expr' or {{'type': 'expr', ...}}"
        )
    return task
