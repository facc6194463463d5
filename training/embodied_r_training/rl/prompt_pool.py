"""GRPO's prompts from the questions the policy answers right only sometimes (experimental).

After SFT many training questions are answered the same way by every completion of a group:
all right or all wrong, so the accuracy reward has no variance there and the group carries no
advantage. Before GRPO this samples ``experimental.prompt_pool_samples`` completions per
candidate question with the policy itself, as GRPO samples them (temperature, top-p, top-k,
``max_completion_length``), scores them with the run's accuracy reward, and keeps the questions
with right *and* wrong answers among them. The pool and every candidate's count go to
``prompt_pool.json`` in the run directory, and a resumed run trains on the same prompts without
sampling again.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from embodied_r_training.data.splits import seeded_draw
from embodied_r_training.recipe import TrainConfig
from embodied_r_training.rewards import accuracy_reward
from embodied_r_training.rl.policy import policy_precision

log = logging.getLogger(__name__)

POOL_FILE = "prompt_pool.json"


@dataclass(frozen=True)
class Candidate:
    """One candidate question: how many of its sampled completions were right."""

    id: str
    category: str
    right: int
    samples: int

    @property
    def sometimes_right(self) -> bool:
        return 0 < self.right < self.samples


def count_right(
    rows: Sequence[dict[str, Any]],
    complete: Callable[[dict[str, Any]], list[str]],
    answer_mode: str,
) -> list[Candidate]:
    """Each row's completions (``complete(row)``) scored by the accuracy reward."""
    from tqdm import tqdm

    out: list[Candidate] = []
    for row in tqdm(rows, desc="prompt pool", unit="q", dynamic_ncols=True):
        texts = complete(row)
        scores = accuracy_reward(texts, [row["solution"]] * len(texts),
                                 [row["options"]] * len(texts), answer_mode=answer_mode)
        out.append(Candidate(str(row["id"]), str(row.get("category", "")), int(sum(scores)),
                             len(texts)))
    return out


def policy_sampler(cfg: TrainConfig, model: Any, tokenizer: Any,
                   device: str) -> Callable[[dict[str, Any]], list[str]]:
    """``row -> completions``: ``experimental.prompt_pool_samples`` replies of the policy to the
    row's prompt, sampled with GRPO's settings under the run's compute precision."""
    import torch

    g = cfg.grpo
    compute = policy_precision(cfg, device).compute

    def complete(row: dict[str, Any]) -> list[str]:
        ids = tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True,
                                            return_tensors="pt", return_dict=True).to(device)
        with torch.no_grad(), torch.autocast(device_type=device, dtype=getattr(torch, compute),
                                             enabled=compute != "float32"):
            out = model.generate(
                **ids, do_sample=True, temperature=g.temperature, top_p=g.top_p,
                top_k=g.top_k or None, max_new_tokens=g.max_completion_length,
                num_return_sequences=cfg.experimental.prompt_pool_samples,
                pad_token_id=tokenizer.pad_token_id)
        return tokenizer.batch_decode(out[:, ids["input_ids"].shape[1]:],
                                      skip_special_tokens=True)

    return complete


def select_pool(rows: Sequence[dict[str, Any]], candidates: Sequence[Candidate],
                limit: int | None) -> list[dict[str, Any]]:
    """The rows (``candidates`` counts them, in the same order) answered right sometimes, at
    most ``limit``."""
    pool = [r for r, c in zip(rows, candidates, strict=True) if c.sometimes_right]
    return pool[:limit] if limit is not None else pool


def prompt_pool(cfg: TrainConfig, rows: Sequence[dict[str, Any]], out: Path,
                complete: Callable[[dict[str, Any]], list[str]]) -> list[dict[str, Any]]:
    """GRPO's training rows: the sometimes-right questions among
    ``experimental.prompt_pool_candidates`` seeded candidates (at most ``grpo.max_rows`` of
    them), read back from ``prompt_pool.json`` when the run directory has one."""
    g, x = cfg.grpo, cfg.experimental
    path = out / POOL_FILE
    if path.is_file():
        saved = json.loads(path.read_text())
        by_id = {str(r["id"]): r for r in rows}
        missing = [i for i in saved["pool"] if i not in by_id]
        if missing:
            raise ValueError(f"{path}: questions {', '.join(missing[:3])} are not in the "
                             "training rows; remove the file to sample a new pool")
        log.info("prompt pool: %d questions from %s", len(saved["pool"]), path)
        # in the saved order: the trainer's seeded sampler must draw the same prompts again
        return [by_id[i] for i in saved["pool"]]
    drawn = seeded_draw(rows, x.prompt_pool_candidates or len(rows), g.seed)
    candidates = count_right(drawn, complete, cfg.rewards.answer_mode)
    pool = select_pool(drawn, candidates, g.max_rows)
    if not pool:
        raise ValueError(
            f"prompt pool: none of {len(drawn)} candidate questions got both right and wrong "
            f"answers in {x.prompt_pool_samples} samples; raise "
            "experimental.prompt_pool_candidates or set experimental.prompt_pool_samples: 0")
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({
        "samples": x.prompt_pool_samples,
        "pool": [str(r["id"]) for r in pool],
        "candidates": [asdict(c) for c in candidates],
    }, indent=1))
    sometimes = sum(c.sometimes_right for c in candidates)
    log.info("prompt pool: %d of %d candidates sometimes right (%d always, %d never); %d kept",
             sometimes, len(candidates),
             sum(c.right == c.samples for c in candidates),
             sum(c.right == 0 for c in candidates), len(pool))
    return pool
