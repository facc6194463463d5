"""One reply on CTranslate2, two ways of listening to its tokens: which costs less on 2 cores?

``Generator.generate_tokens`` (how the ``ctranslate2`` backend streamed replies until issue 19's
last change) runs the decoding loop in a second Python thread and hands every token to the
caller over a queue; ``generate_batch(callback=...)`` (the backend now) runs the same loop in
the calling thread and calls back on each token. Both stop on ``</answer>``, cache the prompt's
shared prefix as the engine's ``static_prompt`` and decode greedily with the offline profile's
limit. The two are timed alternately on the demo's prompts (built once into ``--data`` as
``bench/lm_engines.py`` builds them, the same directory), so a change in machine load falls
on both; the replies must be identical.

Run: ``.venv/bin/python bench/ct2_decode_paths.py [--data DIR] [--questions 30]``
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from lm_engines import DEFAULT_DATA, demo_rows

from embodied_r_ros.core.backends.base import cut_at_stop
from embodied_r_ros.core.backends.ctranslate2_backend import CTranslate2Backend
from embodied_r_ros.core.config import load_config

STOP = ["</answer>"]


def streamed_reply(backend: CTranslate2Backend, conversation: list[dict], max_new: int) -> str:
    """The reply as ``generate_tokens`` gives it, with the same prefix split and stop check."""
    ids = backend.prompt_ids(conversation)
    prefix, rest = backend.split_prompt(ids)
    tokens = backend.tokenizer.convert_ids_to_tokens
    kwargs = {"max_length": max_new, "end_token": backend.end_ids,
              "sampling_topk": 1}
    if prefix:
        kwargs.update(static_prompt=tokens(prefix), cache_static_prompt=True)
    out: list[int] = []
    stream = backend.generator.generate_tokens(tokens(rest), **kwargs)
    try:
        for step in stream:
            if step.token_id in backend.end_ids:  # as the backend did: end tokens are not text
                continue
            out.append(int(step.token_id))
            cut = cut_at_stop(backend.tokenizer.decode(out, skip_special_tokens=True), STOP)
            if cut is not None:
                return cut
    finally:
        stream.close()
    return backend.tokenizer.decode(out, skip_special_tokens=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--questions", type=int, default=30)
    args = parser.parse_args(argv)
    rows = demo_rows(args.data)
    rows = rows[: args.questions]
    cfg = load_config(profile="offline").reasoning.model
    backend = CTranslate2Backend(cfg)
    backend.complete([rows[0]["prompt"]], max_new_tokens=4)  # warm: load, prefix seen once
    times: dict[str, list[float]] = {"generate_tokens": [], "callback": []}
    same = 0
    for row in rows:
        t = time.perf_counter()
        old = streamed_reply(backend, row["prompt"], cfg.max_new_tokens)
        times["generate_tokens"].append(time.perf_counter() - t)
        t = time.perf_counter()
        new = backend.complete([row["prompt"]], stop=STOP)[0].text
        times["callback"].append(time.perf_counter() - t)
        same += old == new
    for name, xs in times.items():
        print(f"{name:>16}: p50 {statistics.median(xs):.2f} s, max {max(xs):.2f} s, "
              f"total {sum(xs):.1f} s")
    ratio = sum(times["generate_tokens"]) / sum(times["callback"])
    print(f"generate_tokens / callback: {ratio:.2f}x in total; identical replies "
          f"{same}/{len(rows)}")
    return 0 if same == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
