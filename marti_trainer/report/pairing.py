"""Runs grouped by config (:func:`group_runs`) and paired with a baseline config on the seeds
and held-out problems they share (:func:`pair_with_baseline`, :func:`pair_versus`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from marti_trainer.report.runs import RunRecord, _defining


@dataclass
class Group:
    """Runs of one config (all seeds). ``label``: the keys that set it apart."""

    label: str
    config: dict[str, Any]
    runs: list[RunRecord]

    def by_seed(self) -> dict[int, RunRecord]:
        return {r.seed: r for r in self.runs}


def group_runs(runs: Sequence[RunRecord]) -> list[Group]:
    """Finished runs grouped by config (see :data:`~marti_trainer.report.runs.NOT_CONFIG`),
    in order of first appearance; two runs of one config with the same seed is an error
    naming both."""
    groups: dict[str, list[RunRecord]] = {}
    for r in runs:
        groups.setdefault(r.group_key, []).append(r)
    configs = [_defining(rs[0].config) for rs in groups.values()]
    keys = sorted({k for c in configs for k in c})
    varying = [k for k in keys if len({json.dumps(c.get(k), default=repr) for c in configs}) > 1]
    out = []
    for config, rs in zip(configs, groups.values(), strict=True):
        seen: dict[int, RunRecord] = {}
        for r in rs:
            if r.seed in seen:
                raise ValueError(
                    f"{seen[r.seed].path} and {r.path} are the same config and seed: "
                    "report one of them"
                )
            seen[r.seed] = r
        label = ", ".join(f"{k}={_value(config.get(k))}" for k in varying) or "all runs"
        out.append(Group(label, config, sorted(rs, key=lambda r: r.seed)))
    names = [{r.config.get("exp_name") for r in g.runs} for g in out]
    if (
        len(out) > 1
        and all(len(n) == 1 and None not in n for n in names)
        and len({*map(min, names)}) == len(out)
    ):
        for g, n in zip(out, names, strict=True):  # one distinct name each: the readable label
            g.label = str(min(n))
    return out


def _matches(value: Any, raw: str) -> bool:
    """Whether a config value equals a command-line value: as YAML, as a number (``1e-4``,
    which YAML reads as a string), or as text."""
    try:
        if value == yaml.safe_load(raw):
            return True
    except yaml.YAMLError:
        pass
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            return float(raw) == value
        except ValueError:
            return False
    return _value(value) == raw


def _value(v: Any) -> str:
    return json.dumps(v) if isinstance(v, (list, dict)) else str(v)


def _problem_mismatch(a: RunRecord, b: RunRecord) -> str | None:
    """Why two runs' held-out problems differ, or None if they are the same."""
    if a.answers is not None and b.answers is not None:
        if a.answers == b.answers:
            return None
        if len(a.answers) != len(b.answers):
            return f"{len(a.answers)} against {len(b.answers)} problems"
        only = sorted(set(a.answers) ^ set(b.answers))
        if only:
            return f"problem {only[0]} is in only one of them"
        diff = next(t for t in sorted(a.answers) if a.answers[t] != b.answers[t])
        return f"problem {diff} has answer {a.answers[diff]!r} against {b.answers[diff]!r}"
    spec_a = {k: v for k, v in a.config.items() if k.startswith("env.eval_tasks")}
    spec_b = {k: v for k, v in b.config.items() if k.startswith("env.eval_tasks")}
    if spec_a != spec_b:
        k = sorted(set(spec_a) | set(spec_b), key=lambda k: spec_a.get(k) == spec_b.get(k))[0]
        return f"{k} is {spec_a.get(k)!r} against {spec_b.get(k)!r} (no eval transcript to compare)"
    return None


@dataclass
class Pairing:
    """A config against its baseline on their common seeds (``baseline`` None: no config
    differs from it in the baseline key, and the options of its value, alone)."""

    group: Group
    baseline: Group | None
    seeds: list[int]


def _refuse_other_heldout(g: Group, bases: Sequence[Group], key: str) -> None:
    """A baseline that differs from ``g`` (besides ``key``) only in its held-out set
    (``env.eval_tasks.*``) would be the partner but for the problems: say so."""
    for b in bases:
        mine, theirs = _without(g.config, key), _without(b.config, key)
        diff = sorted(k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k))
        if diff and all(k.startswith("env.eval_tasks") for k in diff):
            shown = ", ".join(f"{k} {g.config.get(k)!r} against {b.config.get(k)!r}" for k in diff)
            raise ValueError(
                f"refusing to pair {g.label} with {b.label}: their held-out problem sets "
                f"differ: {shown}. A paired difference needs both configs evaluated on the "
                "same problems."
            )


def options_of(key: str, config_key: str) -> bool:
    """Whether ``config_key`` is an option of the value that ``key`` selects: a key under
    ``key + "_kwargs"`` (``env.credit_kwargs.alpha`` configures ``env.credit``). Configs that
    differ in ``key`` may differ in its options too and still be each other's partners:
    shaping on (``credit: quality`` with its ``credit_kwargs``) against off (``credit:
    none``, without them)."""
    return config_key.startswith(key + "_kwargs.") or config_key == key + "_kwargs"


def pair_with_baseline(groups: Sequence[Group], baseline: str) -> list[Pairing]:
    """Each group against the group that differs from it only in ``key`` (and the options
    of ``key``'s value, :func:`options_of`) and has ``key=value`` (``baseline =
    "key=value"``). Of several such groups, the one whose options equal the group's.

    Raises:
        ValueError: ``baseline`` is malformed, names an unknown key, or matches no config;
            a group has several baselines, none or more than one with its options;
            or two runs to be paired (same seed) were evaluated on different problems.
    """
    key, raw = _key_value(baseline, "--baseline", "env.credit=none")
    if not any(key in g.config for g in groups):
        known = sorted({k for g in groups for k in g.config})
        raise ValueError(f"--baseline {key}: not a config key of these runs (known: {known})")
    is_base = [_matches(g.config.get(key), raw) for g in groups]
    if not any(is_base):
        values = sorted({_value(g.config.get(key)) for g in groups})
        raise ValueError(f"--baseline {baseline}: no config has it; {key} takes {values}")
    bases = [b for b, ok in zip(groups, is_base, strict=True) if ok]
    pairings = []
    for g, base in zip(groups, is_base, strict=True):
        if base:
            continue
        rest = _without(g.config, key)
        match = [b for b in bases if _without(b.config, key) == rest]
        if len(match) > 1:  # baselines that differ in their options: the one with g's options
            same = [b for b in match if _options(b.config, key) == _options(g.config, key)]
            if len(same) != 1:
                raise ValueError(
                    f"--baseline {baseline}: {g.label} has {len(match)} possible baselines, "
                    f"which differ only in {key}_kwargs ({'; '.join(b.label for b in match)}): "
                    "report them apart, or compare with --versus"
                )
            match = same
        if not match:
            _refuse_other_heldout(g, bases, key)
            pairings.append(Pairing(g, None, []))
            continue
        pairings.append(_paired(g, match[0]))
    return pairings


def _without(config: dict[str, Any], key: str) -> dict[str, Any]:
    """``config`` without ``key`` and its options (:func:`options_of`)."""
    return {k: v for k, v in config.items() if k != key and not options_of(key, k)}


def _options(config: dict[str, Any], key: str) -> dict[str, Any]:
    """The options of ``key``'s value in ``config`` (:func:`options_of`)."""
    return {k: v for k, v in config.items() if options_of(key, k)}


def _key_value(spec: str, flag: str, example: str) -> tuple[str, str]:
    """``"key=value"`` -> ``(key, value)``, both stripped; a spec without both is an error
    naming ``flag``."""
    key, sep, raw = spec.partition("=")
    if not sep or not key.strip():
        raise ValueError(f"{flag} {spec!r}: expected key=value (e.g. {example})")
    return key.strip(), raw.strip()


def _paired(g: Group, base: Group) -> Pairing:
    """``g`` against ``base`` on their common seeds.

    Raises:
        ValueError: the two runs of a seed were evaluated on different problems.
    """
    seeds = sorted(set(g.by_seed()) & set(base.by_seed()))
    for s in seeds:
        why = _problem_mismatch(g.by_seed()[s], base.by_seed()[s])
        if why:
            raise ValueError(
                f"refusing to pair {g.by_seed()[s].path} with {base.by_seed()[s].path} "
                f"(seed {s}): their held-out problem sets differ: {why}. A paired "
                "difference needs both configs evaluated on the same problems."
            )
    return Pairing(g, base, seeds)


def pair_versus(groups: Sequence[Group], versus: str) -> list[Pairing]:
    """Every other group against the one group whose runs have ``key=value`` (``versus =
    "key=value"``; ``key`` may be ``exp_name``), whatever else differs: the comparison of
    different config files (single agent against a debate at equal budget). The keys that
    differ are :func:`differing_keys`.

    Raises:
        ValueError: ``versus`` is malformed, or matches no group or more than one (named);
            or two runs to be paired (same seed) were evaluated on different problems.
    """
    key, raw = _key_value(versus, "--versus", "exp_name=single")
    hits = [g for g in groups if all(_matches(r.config.get(key), raw) for r in g.runs)]
    if len(hits) != 1:
        if not any(key in r.config for g in groups for r in g.runs):
            known = sorted({k for g in groups for r in g.runs for k in r.config})
            raise ValueError(f"--versus {key}: not a config key of these runs (known: {known})")
        values = sorted({_value(r.config.get(key)) for g in groups for r in g.runs})
        which = "no config has it" if not hits else (
            f"{len(hits)} configs have it ({'; '.join(g.label for g in hits)}): name one by a "
            "key only it has (e.g. its exp_name), or pair by --baseline"
        )  # fmt: skip
        raise ValueError(f"--versus {versus}: {which}; {key} takes {values}")
    return [_paired(g, hits[0]) for g in groups if g is not hits[0]]


def differing_keys(a: Group, b: Group) -> list[str]:
    """The config keys (flattened, without seed, names and ``log.*``) on which two groups
    differ, sorted; the deepest ones (``env.kwargs.rounds``, not also ``env.kwargs``)."""
    keys = set(a.config) | set(b.config)
    differ = {k for k in keys if json.dumps(a.config.get(k), default=repr)
              != json.dumps(b.config.get(k), default=repr)}  # fmt: skip
    # an empty mapping on one side flattens to its own key: name the nested keys instead
    return sorted(k for k in differ if not any(d.startswith(k + ".") for d in differ))


def training_pairs(
    seeds: Sequence[int], runs: dict[int, RunRecord], bases: dict[int, RunRecord]
) -> tuple[list[int], str]:
    """The seeds (of ``seeds``) whose run and baseline run can be paired on their
    :attr:`~marti_trainer.report.runs.RunRecord.training_outcome` (their curves cover the same
    steps: :meth:`~marti_trainer.report.runs.RunRecord.same_steps`), and why the others
    cannot (``"no training curve: seeds 3; trained for different steps: seeds 4"``, empty
    when every seed can)."""
    no_curve = [s for s in seeds if not runs[s].curve or not bases[s].curve]
    other = [s for s in seeds if s not in no_curve and not runs[s].same_steps(bases[s])]
    reasons = (("no training curve", no_curve), ("trained for different steps", other))
    why = [f"{what}: seeds {', '.join(map(str, which))}" for what, which in reasons if which]
    return [s for s in seeds if s not in no_curve and s not in other], "; ".join(why)
