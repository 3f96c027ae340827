"""my_credit.py: a new credit method, registered as "round_relative"."""

from dataclasses import dataclass

from marti_env.credit import CreditMethod, register_credit


@register_credit("round_relative")
@dataclass
class RoundRelative(CreditMethod):
    """r_t = R + w * (s_t - mean of s over the turns of t's round).

    The team outcome, plus how much better the turn scored than its round.
    """

    w: float = 0.5

    def __post_init__(self) -> None:
        if not 0.0 <= self.w <= 10.0:
            raise ValueError(f"credit method '{self.name}': w must be in [0, 10], got {self.w}")

    def assign(self, episode, rule):
        by_round: dict[int, list[float]] = {}
        for t in episode.turns:
            by_round.setdefault(t.round, []).append(t.score)
        mean = {k: sum(v) / len(v) for k, v in by_round.items()}
        return [episode.outcome + self.w * (t.score - mean[t.round]) for t in episode.turns]
