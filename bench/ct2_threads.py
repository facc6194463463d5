"""How should a 135M reasoner use 2 CPU cores on CTranslate2: both on one reply, or one each?

Two ways, side by side in one run on the demo's prompts (built once into ``--data`` as
``bench/lm_engines.py`` builds them, the same directory), the shipped reasoner greedy with the
offline profile's settings, every setting in a fresh process of its own (the engine's OpenMP
threads of one setting would otherwise spin beside the other's), in rounds (A B A B ...):

  one reply     what a robot's question waits for: the backend with both cores on the reply
                (``threads_per_reply: 2``, until this change) against one core
                (``threads_per_reply: 1``, the second worker idle); the replies must be
                identical
  a batch       what an evaluation asks: ``--batch`` demo prompts through the engine as the
                backend called it until this change (2 threads, padded batches of the
                profile's ``batch_size``) against the backend now (2 workers of one thread,
                each prompt alone); replies that differ between the two are counted (padding
                moves int8 replies), and the batch's replies must equal the single replies

Run: ``.venv/bin/python bench/ct2_threads.py [--data DIR] [--questions 30] [--batch 16]
[--rounds 1]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from lm_engines import DEFAULT_DATA, demo_rows

STOP = ["</answer>"]
MODES = ("reply-2", "reply-1", "batch-old", "batch-new")


def child(mode: str, rows: list[dict]) -> dict:
    """Times ``mode`` in this process: ``reply-N`` one prompt at a time on N threads a reply,
    ``batch-old``/``batch-new`` all of ``rows`` in one call."""
    from embodied_r_ros.core.backends.base import cut_at_stop
    from embodied_r_ros.core.backends.ctranslate2_backend import CTranslate2Backend
    from embodied_r_ros.core.config import load_config

    cfg = load_config(profile="offline").reasoning.model
    per_reply = 2 if mode in ("reply-2", "batch-old") else 1
    backend = CTranslate2Backend(cfg.model_copy(update={"threads": 2,
                                                        "threads_per_reply": per_reply}))
    backend.complete([r["prompt"] for r in rows[:2]], max_new_tokens=4, cancel=None,
                     on_reply=lambda i, c: None)  # warm: load, the shared prefix seen twice
    convs = [r["prompt"] for r in rows]
    if mode.startswith("reply-"):
        times, texts = [], []
        for conv in convs:
            t = time.perf_counter()
            reply = backend.complete([conv], stop=STOP)[0]
            times.append(time.perf_counter() - t)
            texts.append(reply.text)
        backend.close()
        return {"times": times, "texts": texts}
    t = time.perf_counter()
    if mode == "batch-new":
        texts = [c.text for c in backend.complete(convs, stop=STOP)]
    else:  # the call the backend made until this change
        tok = backend.tokenizer
        results = backend.generator.generate_batch(
            [tok.convert_ids_to_tokens(backend.prompt_ids(c)) for c in convs],
            max_length=cfg.max_new_tokens, sampling_topk=1, end_token=backend.end_ids,
            include_prompt_in_result=False, max_batch_size=cfg.batch_size)
        decoded = [tok.decode([i for i in r.sequences_ids[0] if i not in backend.end_ids],
                              skip_special_tokens=True) for r in results]
        texts = [cut_at_stop(text, STOP) or text for text in decoded]
    elapsed = time.perf_counter() - t
    backend.close()
    return {"times": [elapsed], "texts": texts}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--questions", type=int, default=30)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    rows = demo_rows(args.data)
    if args.child:
        n = args.questions if args.child.startswith("reply-") else args.batch
        print(json.dumps(child(args.child, rows[:n])))
        return 0
    runs: dict[str, list[dict]] = {mode: [] for mode in MODES}
    for _ in range(args.rounds):
        for mode in MODES:
            out = subprocess.run([sys.executable, __file__, "--child", mode, "--data",
                                  str(args.data), "--questions", str(args.questions),
                                  "--batch", str(args.batch)],
                                 check=True, capture_output=True, text=True).stdout
            runs[mode].append(json.loads(out.strip().splitlines()[-1]))
    times = {m: [t for r in rs for t in r["times"]] for m, rs in runs.items()}
    texts = {m: [t for r in rs for t in r["texts"]] for m, rs in runs.items()}
    print(f"one reply, {args.questions} demo questions x {args.rounds} round(s):")
    for mode, threads in (("reply-2", 2), ("reply-1", 1)):
        xs = times[mode]
        print(f"  {threads} thread(s) on the reply: p50 {statistics.median(xs):.2f} s, "
              f"max {max(xs):.2f} s, total {sum(xs):.1f} s")
    same = sum(a == b for a, b in zip(texts["reply-2"], texts["reply-1"], strict=True))
    print(f"  2 threads / 1 thread: {sum(times['reply-2']) / sum(times['reply-1']):.2f}x the "
          f"time; identical replies {same}/{len(texts['reply-1'])}")
    old_s, new_s = sum(times["batch-old"]), sum(times["batch-new"])
    differ = sum(a != b for a, b in zip(texts["batch-old"], texts["batch-new"], strict=True))
    alone = texts["reply-1"][: args.batch]
    equal = sum(a == b for a, b in zip(alone, texts["batch-new"], strict=False))
    print(f"a batch of {args.batch} demo prompts x {args.rounds} round(s): 2 threads, padded "
          f"batches: {old_s:.1f} s; 2 workers x 1 thread, one prompt each: {new_s:.1f} s "
          f"({old_s / new_s:.2f}x); replies that differ between the two: "
          f"{differ}/{len(texts['batch-new'])}; batch replies equal to single replies: "
          f"{equal}/{len(alone)}")
    return 0 if same == len(texts["reply-1"]) and equal == len(alone) else 1


if __name__ == "__main__":
    sys.exit(main())
