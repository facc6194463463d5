"""Scoring completions against a built split: accuracy read both ways (``official``, the official
evaluation extractor, and ``tag``, the ``<answer>`` tag against the options) per category with
95 % bootstrap intervals, format and consistency rates, and the rule-based rows that need no
model (:data:`BASELINES`: ``chance``, ``first-option``, ``oracle``)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from embodied_r_ros.core.reasoning import AnswerMode, extract_answer, is_well_formed
from embodied_r_ros.intervals import bootstrap_ci
from embodied_r_training.rewards import solution_letter

ANSWER_MODES: tuple[AnswerMode, ...] = ("official", "tag")
#: ``--model`` names answered by rules instead of an LM
BASELINES = ("chance", "first-option", "oracle")


@dataclass
class EvalResult:
    model: str
    split: str
    n: int
    accuracy: float  # in ``answer_mode``
    format_rate: float | None  # None: a rule-based row (no completions to format)
    consistency_rate: float | None  # None: not measured (no reference LM)
    per_category: dict[str, dict[str, float]] = field(default_factory=dict)
    fold: int | None = None
    seconds: float = 0.0
    folds: list[dict[str, Any]] = field(default_factory=list)  # k-fold mode: each fold
    answer_mode: str = "tag"
    accuracy_by_mode: dict[str, float] = field(default_factory=dict)  # official and tag
    accuracy_ci: tuple[float, float] | None = None  # 95 % bootstrap interval of ``accuracy``
    mean_completion_tokens: float | None = None  # None: no tokenizer (or no completions)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)



def answer_in(completion: str, options: Sequence[str], mode: AnswerMode) -> str:
    """The answer evaluation reads (``official``: the official evaluation extractor)."""
    from embodied_r_ros.core.reasoning import OptionsError

    try:
        return extract_answer(completion, list(options), mode)
    except OptionsError:
        return ""


def baseline_completions(name: str, rows: Sequence[dict[str, Any]]) -> list[str]:
    """What a rule answers, written as a completion (``first-option``: A; ``oracle``: the
    rule reader's letter, or the one a row's own ``rule_reading`` records)."""
    from embodied_r_ros.core.reasoning import parse_options
    from embodied_r_training.data.oracle import answer_letter

    out = []
    for row in rows:
        options = dict(parse_options(row["options"]))
        if name == "first-option":
            letter = next(iter(options))
        elif (reading := row.get("rule_reading")) is not None:
            letter = reading.get("letter") or "A"
        else:
            letter = answer_letter(row)
        out.append(f"<think>{name}</think>\n<answer>{letter}. {options.get(letter, '')}</answer>")
    return out


def score(
    rows: Sequence[dict[str, Any]],
    completions: Sequence[str],
    *,
    answer_mode: str = "tag",
    judge: Any = None,
    expected: Sequence[float] | None = None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Metrics and per-row predictions for ``completions`` of ``rows``; ``judge`` (a
    :class:`~embodied_r_training.rewards.ConsistencyReward`) measures the consistency rate.
    ``expected``: per-row probabilities of a correct answer that replace the hits (``chance``)."""
    mode: AnswerMode = "official" if answer_mode == "official" else "tag"
    pairs = list(zip(rows, completions, strict=True))
    answers = {m: [answer_in(c, r["options"], m) for r, c in pairs] for m in ANSWER_MODES}
    truth = [solution_letter(r["solution"], r["options"], "tag") for r in rows]
    hits_by: dict[str, list[float]] = {
        m: [float(bool(a) and a == t) for a, t in zip(answers[m], truth, strict=True)]
        for m in ANSWER_MODES
    }
    if expected is not None:
        hits_by = {m: [float(x) for x in expected] for m in ANSWER_MODES}
    hits = hits_by[mode]
    formed = [is_well_formed(c) for c in completions]
    consistent: list[float] | None = None
    if judge is not None:
        consistent = judge(
            prompts=[r["prompt"] for r in rows],
            completions=list(completions),
            solution=[r["solution"] for r in rows],
            options=[r["options"] for r in rows],
            question_block=[r.get("question_block") for r in rows],
        )
    by_cat: dict[str, list[int]] = defaultdict(list)
    for i, row in enumerate(rows):
        by_cat[str(row.get("category", "unknown"))].append(i)
    n = len(rows)
    n_correct = sum(hits)

    def rate(values: Sequence[float], idx: Sequence[int]) -> float:
        return sum(values[i] for i in idx) / len(idx) if idx else 0.0

    def ci(idx: Sequence[int]) -> tuple[float, float]:
        return bootstrap_ci([hits[i] for i in idx])

    metrics = {
        "n": n,
        "accuracy": n_correct / n if n else 0.0,
        "answer_mode": mode,
        "accuracy_by_mode": {m: rate(hits_by[m], range(n)) for m in ANSWER_MODES},
        "accuracy_ci": ci(range(n)),
        "format_rate": sum(formed) / n if n else 0.0,
        "consistency_rate": (
            (sum(consistent) / n_correct if n_correct else 0.0) if consistent is not None else None
        ),
        "per_category": {
            cat: {"n": len(idx), "accuracy": rate(hits, idx),
                  **dict(zip(("ci_low", "ci_high"), ci(idx), strict=True)),
                  **{f"accuracy_{m}": rate(hits_by[m], idx) for m in ANSWER_MODES}}
            for cat, idx in sorted(by_cat.items())
        },
    }
    preds = [
        {
            "id": r["id"],
            "category": r.get("category"),
            "solution": r["solution"],
            "answer": answers[mode][i],
            **{f"answer_{m}": answers[m][i] for m in ANSWER_MODES},
            "correct": hits[i] if expected is not None else bool(hits[i]),
            "well_formed": formed[i],
            "consistent": None if consistent is None else bool(consistent[i]),
            "completion": c,
        }
        for i, (r, c) in enumerate(pairs)
    ]
    return metrics, preds



def mean_tokens(tokenizer: Any, texts: Sequence[str]) -> float | None:
    """Mean length of ``texts`` in the model's own tokens."""
    if not texts:
        return None
    return sum(len(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts) / len(
        texts
    )


def average_folds(results: Sequence[EvalResult]) -> EvalResult:
    """k-fold mean: each metric averaged over folds (a category over the folds that have it)."""
    if not results:
        raise ValueError("no folds to average")

    def mean(values: Sequence[float]) -> float:
        return sum(values) / len(values)

    cats: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    counts: dict[str, int] = defaultdict(int)
    for r in results:
        for cat, m in r.per_category.items():
            for key, value in m.items():
                if key.startswith("accuracy"):
                    cats[cat][key].append(value)
            counts[cat] += int(m["n"])
    cons = [r.consistency_rate for r in results if r.consistency_rate is not None]
    formats = [r.format_rate for r in results if r.format_rate is not None]
    return EvalResult(
        model=results[0].model,
        split=f"{len(results)}-fold test",
        n=sum(r.n for r in results),
        accuracy=mean([r.accuracy for r in results]),
        format_rate=mean(formats) if formats else None,
        consistency_rate=mean(cons) if cons else None,
        per_category={
            c: {"n": counts[c], **{k: mean(v) for k, v in keys.items()}}
            for c, keys in sorted(cats.items())
        },
        seconds=sum(r.seconds for r in results),
        folds=[r.to_dict() for r in results],
        answer_mode=results[0].answer_mode,
        accuracy_by_mode={  # the modes every fold measured
            m: mean([r.accuracy_by_mode[m] for r in results])
            for m in sorted(set.intersection(*(set(r.accuracy_by_mode) for r in results)))
        },
    )
