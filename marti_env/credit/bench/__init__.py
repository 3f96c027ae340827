"""The fast tier of the credit benchmark: simulated agents in the real envs, no LLM.

>>> from marti_env.credit.bench import BenchConfig, run_benchmark, write_outputs
>>> result = run_benchmark(["none", "shapley"], ["mad-v0"], seeds=[0],
...                        config=BenchConfig(updates=2, batch=2, eval_episodes=4,
...                                           attr_configs=1, attr_episodes=4))
>>> sorted(result.summary()[0])[:3]
['acc_auc_mean', 'acc_auc_std', 'acc_final_mean']

numpy, and scipy for the paired CIs (through :mod:`marti_env.stats`); matplotlib only for
the plot, imported on use. The command line is
``marti bench credit`` (:mod:`marti_trainer.cli.bench`); the metrics are defined in
:mod:`marti_env.credit.bench.harness`, the simulated agents in
:mod:`marti_env.credit.bench.sim` (debate, MoA, chain) and
:mod:`marti_env.credit.bench.probes` (the credit-probe envs).
"""

from __future__ import annotations

from marti_env.credit.bench.harness import (
    CONTROLS,
    METRICS,
    BenchConfig,
    BenchResult,
    EnvChoice,
    MethodSpec,
    env_choice,
    method_spec,
    probe_batch,
    random_team,
    run_benchmark,
    true_contributions,
)
from marti_env.credit.bench.probes import PROBE_WORKFLOWS, ProbeTeam
from marti_env.credit.bench.report import plot, write_outputs
from marti_env.credit.bench.sim import (
    SimTeam,
    marginal_contributions,
    play,
    policy_gradient,
    rank_correlation,
    team_accuracy,
)

__all__ = [
    "CONTROLS",
    "METRICS",
    "PROBE_WORKFLOWS",
    "BenchConfig",
    "BenchResult",
    "EnvChoice",
    "MethodSpec",
    "ProbeTeam",
    "SimTeam",
    "env_choice",
    "marginal_contributions",
    "method_spec",
    "play",
    "plot",
    "policy_gradient",
    "probe_batch",
    "random_team",
    "rank_correlation",
    "run_benchmark",
    "team_accuracy",
    "true_contributions",
    "write_outputs",
]
