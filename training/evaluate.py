"""Evaluation of a reasoning LM over a built split, reported beside the paper's numbers.

The perception text is already in the rows (cached at build time), so evaluation runs only the
LM: overall (micro) accuracy as the paper's "Avg." (digest §2.5), accuracy per category, the
share of well-formed replies, and the consistency rate (of the correct answers, how many a
frozen reference LM re-derives from the think text alone). Accuracy is reported read both ways,
side by side: ``official`` (the official evaluation extractor, what the paper's numbers count)
and ``tag`` (this project's reading of the ``<answer>`` tag against the options); the answer
mode picks the headline one. Prompts are evaluated whole unless ``eval.max_prompt_tokens`` is
set. Every accuracy comes with a 95 % bootstrap interval over the questions.

Three rule-based rows need no model and run through the same scoring (:data:`BASELINES`):
``chance`` (the expected accuracy of a uniform guess), ``first-option`` (always A) and
``oracle`` (:mod:`embodied_r_training.oracle`: rules over the exact perception text, the LM's
ceiling). Results go to JSON, markdown (one summary table per dataset, then each run beside the
paper's Embodied-R / o1 / Gemini-2.5-Pro rows) and bar charts.
"""

from __future__ import annotations

import json
import logging
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from embodied_r_ros.core.backends.base import ChatBackend
from embodied_r_ros.core.config import ModelConfig
from embodied_r_ros.core.intervals import bootstrap_ci
from embodied_r_ros.core.reasoning import AnswerMode, extract_answer, is_well_formed
from embodied_r_ros.core.rewards import solution_letter

from .config import TrainConfig, resolve_device
from .dataset_files import jsonl, load_rows, write_atomic
from .prompts import PromptLayout, dataset_layout, fit_rows

ANSWER_MODES: tuple[AnswerMode, ...] = ("official", "tag")
#: ``--model`` names answered by rules instead of an LM
BASELINES = ("chance", "first-option", "oracle")

log = logging.getLogger(__name__)

#: the paper's table columns (digest §5.1) and the category names that fill them: benchmark
#: names, and the sample world's names for the same tasks
PAPER_COLUMNS: dict[str, tuple[str, ...]] = {
    "LP": ("Landmark Position",),
    "C": ("Counterfactual",),
    "PE": ("Progress Evaluation", "progress_evaluation"),
    "AG": ("Action Generation", "action_generation"),
    "RDist": ("object_rel_distance", "relative_distance"),
    "RDir": ("object_rel_direction", "relative_direction"),
    "RP": ("route_planning",),
    "AO": ("obj_appearance_order", "appearance_order"),
}
PAPER_ROWS: dict[str, dict[str, float]] = {
    "Embodied-R (VLM-72B + LLM-3B) [paper]": {
        "Avg": 51.1, "LP": 55.1, "C": 59.9, "PE": 39.7, "AG": 47.6,
        "RDist": 50.0, "RDir": 44.3, "RP": 36.8, "AO": 72.0,
    },
    "OpenAI-o1 [paper]": {
        "Avg": 37.2, "LP": 34.6, "C": 53.3, "PE": 39.1, "AG": 28.0,
        "RDist": 39.7, "RDir": 35.8, "RP": 52.9, "AO": 39.8,
    },
    "Gemini-2.5-Pro [paper]": {
        "Avg": 40.8, "LP": 40.0, "C": 75.0, "PE": 38.7, "AG": 23.5,
        "RDist": 42.0, "RDir": 34.5, "RP": 52.4, "AO": 63.6,
    },
}


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


def generation_backend(model: str, cfg: TrainConfig) -> ChatBackend:
    from embodied_r_ros.core.backends.factory import create_backend

    e = cfg.eval
    return create_backend(
        ModelConfig(
            backend="transformers",
            model=model,
            dtype=e.dtype,
            device=resolve_device(e.device),
            max_new_tokens=e.max_new_tokens,
            temperature=e.temperature,
            batch_size=e.batch_size,
        ),
        text_only=True,
    )


def answer_in(completion: str, options: Sequence[str], mode: AnswerMode) -> str:
    """The answer evaluation reads (``official``: the official evaluation extractor)."""
    from embodied_r_ros.core.reasoning import OptionsError

    try:
        return extract_answer(completion, list(options), mode)
    except OptionsError:
        return ""


def baseline_completions(name: str, rows: Sequence[dict[str, Any]]) -> list[str]:
    """What a rule answers, written as a completion (``first-option``: A; ``oracle``: the
    perception-text solver's letter)."""
    from embodied_r_ros.core.reasoning import parse_options

    from .oracle import answer_letter

    out = []
    for row in rows:
        options = dict(parse_options(row["options"]))
        letter = next(iter(options)) if name == "first-option" else answer_letter(row)
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
    :class:`~embodied_r_ros.core.rewards.ConsistencyReward`) measures the consistency rate.
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


def generate_all(backend: ChatBackend, rows: Sequence[dict[str, Any]], batch: int) -> list[str]:
    from tqdm import tqdm

    out: list[str] = []
    with tqdm(total=len(rows), desc="eval", unit="q", dynamic_ncols=True) as bar:
        for i in range(0, len(rows), batch):
            chunk = rows[i : i + batch]
            out += backend.generate([r["prompt"] for r in chunk])
            bar.update(len(chunk))
    return out


def evaluate(
    model: str,
    data_dir: str | Path,
    cfg: TrainConfig,
    *,
    split: str = "test",
    fold: int | None = None,
    reference: ChatBackend | None = None,
    backend: ChatBackend | None = None,
    answer_mode: str | None = None,
) -> tuple[EvalResult, list[dict[str, Any]]]:
    """Run ``model`` over a split; ``reference`` (a frozen LM) enables the consistency rate.
    ``answer_mode`` (default ``rewards.answer_mode``) picks the headline accuracy."""
    from .grpo import consistency_reward

    start = time.perf_counter()
    rows = load_rows(data_dir, split, fold)
    if not rows:
        raise ValueError(f"split {split!r} of {data_dir} has no rows")
    mode = answer_mode or cfg.rewards.answer_mode
    if model in BASELINES and backend is None:
        from embodied_r_ros.core.reasoning import parse_options

        expected = ([1.0 / len(parse_options(r["options"])) for r in rows]
                    if model == "chance" else None)
        completions = (baseline_completions("first-option", rows) if model == "chance"
                       else baseline_completions(model, rows))
        metrics, preds = score(rows, completions, answer_mode=mode, expected=expected)
        metrics["format_rate"] = None  # a rule has no format to keep
        return EvalResult(model=model, split=split, fold=fold,
                          seconds=time.perf_counter() - start, **metrics), preds
    layout: PromptLayout = dataset_layout(data_dir)
    own = backend is None
    gen = backend or generation_backend(model, cfg)
    try:
        tokenizer = getattr(gen, "tokenizer", None)
        if tokenizer is not None and cfg.eval.max_prompt_tokens is not None:
            rows, _ = fit_rows(rows, tokenizer, cfg.eval.max_prompt_tokens, layout,
                               "drop_oldest_frames")
        completions = generate_all(gen, rows, max(cfg.eval.batch_size, 1) * 4)
        length = mean_tokens(tokenizer, completions) if tokenizer is not None else None
    finally:
        if own:
            gen.close()
    judge = consistency_reward(cfg, reference, layout) if reference is not None else None
    metrics, preds = score(rows, completions, answer_mode=mode, judge=judge)
    result = EvalResult(model=model, split=split, fold=fold,
                        seconds=time.perf_counter() - start, mean_completion_tokens=length,
                        **metrics)
    return result, preds


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


def paper_columns(per_category: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """This run's accuracy (%) in the paper's columns, where a category maps to one."""
    out: dict[str, float] = {}
    for column, names in PAPER_COLUMNS.items():
        for name in names:
            if name in per_category:
                out[column] = 100.0 * per_category[name]["accuracy"]
    return out


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100.0 * value:.1f}"


def markdown_report(results: Mapping[str, EvalResult]) -> str:
    """Per-category tables of each labelled result, then the comparison with the paper."""
    lines: list[str] = []
    for label, r in results.items():
        lines += [
            f"### {label}",
            "",
            f"Model `{r.model}`, split `{r.split}`, {r.n} questions, {r.seconds:.0f} s.",
            "",
            "| Category | n | Accuracy, official (%) | Accuracy, tag (%) |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| {cat} | {int(m['n'])} | {_pct(m.get('accuracy_official'))} | "
            f"{_pct(m.get('accuracy_tag'))} |"
            for cat, m in r.per_category.items()
        ]
        lines += [
            f"| **overall (micro)** | {r.n} | **{_pct(r.accuracy_by_mode.get('official'))}** | "
            f"**{_pct(r.accuracy_by_mode.get('tag'))}** |",
            "",
            f"Headline accuracy ({r.answer_mode} mode): {100.0 * r.accuracy:.1f} %. "
            "official: the official evaluation extractor; tag: the <answer> tag against the "
            "options.",
            "",
            f"Format rate {_pct(r.format_rate)} %, consistency rate {_pct(r.consistency_rate)} %.",
            "",
        ]
    cols = list(PAPER_COLUMNS)
    lines += [
        "### Beside the paper (accuracy %, Avg. = micro average)",
        "",
        "Paper rows: UrbanVideo-Bench + VSI-Bench (digest §5.1). Rows of this project are on its "
        "own data; a category fills the column of the paper task it mirrors, so compare shapes, "
        "not numbers.",
        "",
        "| Method | Avg. | " + " | ".join(cols) + " |",
        "|---|" + "---|" * (len(cols) + 1),
    ]
    for label, r in results.items():
        mine = paper_columns(r.per_category)
        cells = [f"{mine[c]:.1f}" if c in mine else "–" for c in cols]
        lines.append(f"| {label} | {100.0 * r.accuracy:.1f} | " + " | ".join(cells) + " |")
    for label, row in PAPER_ROWS.items():
        lines.append(f"| {label} | {row['Avg']:.1f} | " + " | ".join(f"{row[c]:.1f}" for c in cols)
                     + " |")
    return "\n".join(lines) + "\n"


def _with_ci(value: float, low: float | None, high: float | None) -> str:
    if low is None or high is None:
        return f"{100.0 * value:.1f}"
    return f"{100.0 * value:.1f} [{100.0 * low:.0f}, {100.0 * high:.0f}]"


def summary_table(data_label: str, results: Mapping[str, EvalResult]) -> str:
    """One dataset, one row per model: accuracy overall and per category with 95 % bootstrap
    intervals, format rate, consistency rate and mean completion length."""
    cats: list[str] = []
    for r in results.values():
        cats += [c for c in r.per_category if c not in cats]
    n = max((r.n for r in results.values()), default=0)
    lines = [
        f"### {data_label}: accuracy % [95 % bootstrap interval], {n} questions",
        "",
        "| Model | Overall | " + " | ".join(cats) + " | Format % | Consistency % | Tokens |",
        "|---|---|" + "---|" * len(cats) + "---|---|---|",
    ]
    for label, r in results.items():
        ci = r.accuracy_ci or (None, None)
        cells = [_with_ci(r.accuracy, *ci)]
        for c in cats:
            m = r.per_category.get(c)
            cells.append("–" if m is None else
                         _with_ci(m["accuracy"], m.get("ci_low"), m.get("ci_high")))
        length = "–" if r.mean_completion_tokens is None else f"{r.mean_completion_tokens:.0f}"
        cells += [_pct(r.format_rate), _pct(r.consistency_rate), length]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines.append("")
    return "\n".join(lines) + "\n"


def write_reports(
    by_data: Mapping[str, Mapping[str, EvalResult]],
    out_dir: str | Path,
    predictions: Mapping[str, Mapping[str, Sequence[dict[str, Any]]]] | None = None,
) -> dict[str, Path]:
    """``eval.json``, ``eval.md``, ``eval.png`` and ``predictions-*.jsonl`` of models evaluated
    on one or more datasets (``by_data[data_label][model_label]``). With one dataset the JSON is
    ``{model_label: result}`` and predictions are ``predictions-<model>.jsonl``; with more,
    ``{data_label: {model_label: result}}`` and ``predictions-<data>-<model>.jsonl``."""
    from .plots import accuracy_bars, summary_bars

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "eval.json", "markdown": out / "eval.md", "png": out / "eval.png"}
    single = len(by_data) == 1
    as_json = {d: {k: r.to_dict() for k, r in rs.items()} for d, rs in by_data.items()}
    write_atomic(paths["json"], json.dumps(
        next(iter(as_json.values())) if single else as_json, indent=1))
    parts = [summary_table(d, rs) for d, rs in by_data.items()]
    for d, rs in by_data.items():
        parts.append(markdown_report(rs) if single else f"## {d}\n\n{markdown_report(rs)}")
    write_atomic(paths["markdown"], "\n".join(parts))
    if single:
        results = next(iter(by_data.values()))
        bars = {label: {**{c: m["accuracy"] for c, m in r.per_category.items()},
                        "overall": r.accuracy} for label, r in results.items()}
        accuracy_bars(bars, paths["png"])
    else:
        summary_bars(by_data, paths["png"])
    for d, per_model in (predictions or {}).items():
        for label, preds in per_model.items():
            name = label if single else f"{d}-{label}"
            safe = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in name)
            write_atomic(out / f"predictions-{safe}.jsonl", jsonl(preds))
    return paths


def write_report(
    results: Mapping[str, EvalResult],
    out_dir: str | Path,
    predictions: Mapping[str, Sequence[dict[str, Any]]] | None = None,
    data_label: str = "test",
) -> dict[str, Path]:
    """:func:`write_reports` for models evaluated on one dataset."""
    return write_reports({data_label: results}, out_dir,
                         {data_label: predictions} if predictions else None)
