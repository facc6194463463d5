"""Answer time against a VLM that serves requests concurrently, as vLLM does.

An OpenAI-compatible endpoint on loopback (the project's server around an emulated VLM) answers
each request after ``--vlm-latency`` seconds and serves requests concurrently (continuous
batching: N requests in about the time of one), replying deterministically in the paper's
3-item form; the reasoning LM takes ``--lm-latency`` seconds. For 8, 16 and 32 key frames the
same question is timed, side by side in one run:

  sequential  one VLM call after another (``perception.concurrency: 1``)
  concurrent  every call of the question at once (the default); printed with its speed-up
              over sequential
  re-ask      the window slid by one key frame: only the new pair and first frame are asked
  streaming   descriptions made in the background as frames arrived; the question reads them

Targets: 32 key frames concurrent <= 2 x one VLM call; re-ask after one new key frame <= one VLM
call + LM; streaming <= LM + 50 ms. The perception text of sequential and concurrent is checked
to be byte-identical.

Run: ``.venv/bin/python bench/perception_latency.py [--vlm-latency 1.0] [--lm-latency 0.5]
[--frames 8 16 32] [--json PATH]``
"""

from __future__ import annotations

import argparse
import hashlib
import tempfile
import threading
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
from _figures import add_json_option, write_figures

from embodied_r_ros.backends.factory import load_pipeline
from embodied_r_ros.core.chat import ChatBackend, Completion
from embodied_r_ros.core.pipeline import EmbodiedR
from embodied_r_ros.core.profiles import config_from_dict
from embodied_r_ros.core.request import validate_query
from embodied_r_ros.core.streaming import BackgroundDescriber
from embodied_r_ros.serving import serve

ACTIONS = ("move forward", "rotate left", "rotate right", "move left")


class EmulatedVLM(ChatBackend):
    """Replies after ``latency`` seconds, concurrently; the reply depends on the request."""

    model_id = "emulated-vlm"
    supports_images = True
    concurrent = True

    def __init__(self, latency: float) -> None:
        self.latency = latency
        self.in_flight = 0
        self.peak = 0
        self.requests = 0
        self._lock = threading.Lock()

    def complete(self, conversations: Sequence[Any], **_: Any) -> list[Completion]:
        with self._lock:
            self.in_flight += len(conversations)
            self.peak = max(self.peak, self.in_flight)
            self.requests += len(conversations)
        time.sleep(self.latency)
        with self._lock:
            self.in_flight -= len(conversations)
        out = []
        for conv in conversations:
            parts = conv[-1]["content"]
            h = hashlib.sha256(repr([(p["type"], p["image"].sum() if p["type"] == "image"
                                      else p["text"]) for p in parts]).encode()).digest()
            action = ACTIONS[h[0] % len(ACTIONS)]
            out.append(Completion(f"1. {action}\n2. a door {h[1] % 9} m ahead-left\n"
                                  f"3. the red box, {h[2] % 5} m away"))
        return out


class TimedLM(ChatBackend):
    """The reasoning LM: a fixed latency and a well-formed answer."""

    model_id = "timed-lm"

    def __init__(self, latency: float) -> None:
        self.latency = latency

    def complete(self, conversations: Sequence[Any], **_: Any) -> list[Completion]:
        time.sleep(self.latency)
        return [Completion("<think>the views turned left</think><answer>A</answer>")
                for _ in conversations]


def frames(n: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 255, (48, 64, 3), dtype=np.uint8) for _ in range(n)]


def pipeline(url: str, lm: ChatBackend, cache: str, **perception: Any) -> EmbodiedR:
    cfg = config_from_dict({
        "perception": {"backend": "vlm", **perception,
                       "vlm": {"backend": "openai", "model": "emulated-vlm", "base_url": url,
                               "max_concurrency": 64, "timeout_s": 60, "retries": 0}},
        "reasoning": {"model": {"model": "timed-lm"}},
        "cache": {"dir": cache},
    })
    from embodied_r_ros.backends.factory import create_backend

    assert cfg.perception.vlm is not None
    return load_pipeline(cfg, vlm=create_backend(cfg.perception.vlm), lm=lm)


def ask(p: EmbodiedR, images: list[np.ndarray], stamps: list[float]) -> tuple[float, str]:
    t0 = time.perf_counter()
    question = validate_query("Which way did I turn?", ["A. left", "B. right"])
    answer = p.ask_keyframes(images, stamps, question,
                             motions=[None] * (len(images) - 1), motion_source="visual")
    return time.perf_counter() - t0, answer.perception


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vlm-latency", type=float, default=1.0)
    parser.add_argument("--lm-latency", type=float, default=0.5)
    parser.add_argument("--frames", type=int, nargs="*", default=[8, 16, 32])
    add_json_option(parser)
    args = parser.parse_args(argv)
    vlm, lm = EmulatedVLM(args.vlm_latency), TimedLM(args.lm_latency)
    rows, ok = [], True
    with serve(vlm) as server, tempfile.TemporaryDirectory() as tmp:
        for n in args.frames:
            images, stamps = frames(n + 1, seed=n), [float(i) for i in range(n + 1)]
            window, slid = images[:n], images[1:]
            seq = pipeline(server.url, lm, f"{tmp}/seq{n}", concurrency=1)
            t_seq, text_seq = ask(seq, window, stamps[:n])
            conc = pipeline(server.url, lm, f"{tmp}/conc{n}")
            vlm.peak = 0
            t_conc, text_conc = ask(conc, window, stamps[:n])
            peak = vlm.peak
            before = vlm.requests
            t_slide, _ = ask(conc, slid, stamps[1:])  # same pipeline: its cache has the rest
            slide_calls = vlm.requests - before
            stream = pipeline(server.url, lm, f"{tmp}/stream{n}", mode="streaming")
            assert stream.perceiver is not None
            describer = BackgroundDescriber(stream.perceiver, queue_size=2 * n + 2)
            for img, t in zip(window, stamps, strict=False):
                describer.submit("front", t, img, keyframe=True)
            while describer.described < n:  # the background keeps up as frames arrive
                time.sleep(0.01)
            describer.close()
            t_stream, _ = ask(stream, window, stamps[:n])
            same = text_seq == text_conc
            targets = (t_conc <= 2 * args.vlm_latency,
                       t_slide <= args.vlm_latency + args.lm_latency + 0.05,
                       t_stream <= args.lm_latency + 0.05)
            ok = ok and same and all(targets)
            rows.append((n, t_seq, t_conc, peak, t_slide, slide_calls, t_stream, same, targets))
    print(f"Query latency, VLM call {args.vlm_latency:g} s (served concurrently), "
          f"LM {args.lm_latency:g} s")
    head = ("key frames", "sequential", "concurrent", "seq / conc", "in flight",
            "re-ask (+1 kf)", "its VLM calls", "streaming", "same text")
    print(" | ".join(f"{h:>14s}" for h in head))
    figures = []
    for n, t_seq, t_conc, peak, t_slide, calls, t_stream, same, targets in rows:
        marks = ["" if t else " OVER" for t in targets]
        cells = (str(n), f"{t_seq:.2f} s", f"{t_conc:.2f} s{marks[0]}", f"{t_seq / t_conc:.1f}x",
                 str(peak), f"{t_slide:.2f} s{marks[1]}", str(calls),
                 f"{t_stream:.3f} s{marks[2]}", str(same))
        print(" | ".join(f"{c:>14s}" for c in cells))
        figures.append({"key_frames": n, "sequential_s": t_seq, "concurrent_s": t_conc,
                        "in_flight": peak, "reask_s": t_slide, "reask_vlm_calls": calls,
                        "streaming_s": t_stream, "same_text": same, "targets_met": all(targets)})
    print(f"targets: concurrent <= {2 * args.vlm_latency:g} s, re-ask <= "
          f"{args.vlm_latency + args.lm_latency:g} s (+50 ms), streaming <= "
          f"{args.lm_latency + 0.05:g} s -> {'OK' if ok else 'OVER'}")
    write_figures(args.json, "perception_latency", argv, args, {"per_window": figures, "ok": ok})
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
