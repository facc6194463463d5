"""What grounding objects costs a question: one extra call per key frame, or a longer reply.

The same key frames (``--frames`` of ``--size``) are perceived for the same question three ways,
side by side in one run, by the tiny Qwen2.5-VL on this machine's CPU (the real architecture and
processor, random weights):

  off      the paper's calls only (the baseline)
  request  plus one grounding call per key frame, the frame alone (``grounding.mode: request``)
  reply    the boxes asked for in each perception call (``grounding.mode: reply``)

The prompts are the project's own (config/prompts.yaml), built by the perceiver. A random model
writes no JSON and rarely stops, so each call's reply length is set the way a real VLM's would
run: ``--perception-tokens`` for a perception reply, ``--object-tokens`` per object for the
boxes' JSON (``--objects`` objects), the sum for a reply that carries both. Figures per mode: VLM
calls, prompt tokens as the tiny processor counts them (its pixel bound makes an image at most
64 tokens), prompt tokens at Qwen2.5-VL's own pixel bounds (the image tokens of smart_resize at
``perception.grounding``'s defaults, with the same text tokens), completion tokens, the longest
reply (the decode steps a question waits for where a server runs its calls at once), and the CPU
time of the whole perception (median of ``--repeat``; the tiny model runs one call at a time, so
this is compute, not the latency of a concurrent server).

Bound: ``reply`` must cost fewer tokens than ``request`` at Qwen2.5-VL's bounds (the reason the
docs give for preferring it where compute is what matters); exit 1 where it does not.

Run: ``.venv/bin/python bench/grounding_cost.py [--frames 8] [--size 640x480] [--repeat 3]
[--json PATH]``
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
from _figures import add_json_option, write_figures

from embodied_r_ros.core.chat import ChatBackend, Completion, Conversation, ReplyFn
from embodied_r_ros.core.config import GroundingConfig, ModelConfig, PerceptionConfig
from embodied_r_ros.core.grounding import configured_grid, model_image_size
from embodied_r_ros.core.perception import Perceiver
from embodied_r_ros.core.reasoning import format_question

MODES = ("off", "request", "reply")
QUESTION = format_question("Where is the red chair now?", ["A. to my left", "B. behind me",
                                                           "C. to my right", "D. ahead"])


class LengthSet(ChatBackend):
    """The tiny VLM with each call's reply length set by what the call asks for, and every
    call's tokens counted (the prompt as the processor encodes it, images included)."""

    supports_images = True

    def __init__(self, inner: Any, perception: int, boxes: int) -> None:
        self.inner = inner
        self.model_id = inner.model_id
        self.image_grid = inner.image_grid
        self.lengths = {"perception": perception, "grounding": boxes, "both": perception + boxes}
        self.calls = self.prompt_tokens = self.completion_tokens = self.images = 0
        self.longest = 0  # the longest reply: decode steps on a concurrent server's path

    @staticmethod
    def kind(conversation: Conversation) -> str:
        text = "".join(p.get("text", "") for p in conversation[-1]["content"])
        if "bbox_2d" not in text:
            return "perception"
        return "both" if "```json" in text else "grounding"

    def complete(self, conversations: Sequence[Conversation], *,
                 on_reply: ReplyFn | None = None, **settings: Any) -> list[Completion]:
        out: list[Completion | None] = [None] * len(conversations)
        for kind, length in self.lengths.items():
            index = [i for i, c in enumerate(conversations) if self.kind(c) == kind]
            if not index:
                continue
            group = [conversations[i] for i in index]
            self.prompt_tokens += sum(int(self.inner.encode([c])["input_ids"].shape[1])
                                      for c in group)
            self.images += sum(p["type"] == "image" for c in group for p in c[-1]["content"])
            for j, done in enumerate(self.inner.complete(group, max_new_tokens=length)):
                out[index[j]] = done
                self.completion_tokens += done.completion_tokens or 0
                self.longest = max(self.longest, done.completion_tokens or 0)
                if on_reply is not None:
                    on_reply(index[j], done)
            self.calls += len(group)
        return [c for c in out if c is not None]


def frames(n: int, width: int, height: int) -> list[np.ndarray]:
    """Distinct smooth frames (a pan over a gradient), as a camera's."""
    yy, xx = np.mgrid[0:height, 0 : width + 8 * n]
    canvas = np.stack([xx % 256, yy % 256, (xx // 2 + yy) % 256], axis=-1).astype(np.uint8)
    return [np.ascontiguousarray(canvas[:, 8 * i : 8 * i + width]) for i in range(n)]


def image_tokens(width: int, height: int, max_side: int, bounds: GroundingConfig) -> int:
    """Vision tokens of one image at these pixel bounds (a 2 x 2 merge of 14-pixel patches)."""
    w, h = model_image_size(width, height, max_side, configured_grid(bounds))
    return (w // bounds.factor) * (h // bounds.factor)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=8, help="key frames of the question")
    parser.add_argument("--size", default="640x480", help="camera image WxH")
    parser.add_argument("--perception-tokens", type=int, default=96,
                        help="reply length of a perception call")
    parser.add_argument("--object-tokens", type=int, default=22,
                        help="tokens of one object's JSON item")
    parser.add_argument("--objects", type=int, default=3, help="objects a frame's JSON lists")
    parser.add_argument("--repeat", type=int, default=3)
    add_json_option(parser)
    args = parser.parse_args(argv)
    width, height = (int(v) for v in args.size.lower().split("x"))
    from embodied_r_ros.backends.factory import create_backend

    logging.getLogger("embodied_r_ros.core.perception").setLevel(logging.ERROR)  # its JSON
    tiny = create_backend(ModelConfig(model="tiny-qwen2.5-vl", device="cpu", dtype="float32",
                                      batch_size=1, image_max_side=640))
    boxes = args.objects * args.object_tokens + 4  # the list's brackets and the code fence
    images = frames(args.frames, width, height)
    stamps = [float(i) for i in range(args.frames)]
    assert tiny.image_grid is not None
    tiny_bounds = GroundingConfig(min_pixels=tiny.image_grid.min_pixels,
                                  max_pixels=tiny.image_grid.max_pixels)
    per_image = {"tiny": image_tokens(width, height, 640, tiny_bounds),
                 "qwen25": image_tokens(width, height, 640, GroundingConfig())}
    rows: dict[str, dict[str, Any]] = {}
    for mode in MODES:
        vlm = LengthSet(tiny, args.perception_tokens, boxes)
        cfg = PerceptionConfig(vlm=ModelConfig(model=tiny.model_id, image_max_side=640),
                               grounding={"mode": mode}, concurrency=0)
        seconds = []
        for _ in range(args.repeat):
            vlm.calls = vlm.prompt_tokens = vlm.completion_tokens = vlm.images = vlm.longest = 0
            t0 = time.perf_counter()
            Perceiver(cfg, vlm).describe(images, stamps, QUESTION)  # no cache: every call
            seconds.append(time.perf_counter() - t0)
        text_tokens = vlm.prompt_tokens - vlm.images * per_image["tiny"]
        qwen25 = text_tokens + vlm.images * per_image["qwen25"]
        rows[mode] = {"vlm_calls": vlm.calls, "images_sent": vlm.images,
                      "prompt_tokens_tiny": vlm.prompt_tokens, "prompt_tokens_qwen25": qwen25,
                      "completion_tokens": vlm.completion_tokens,
                      "longest_reply_tokens": vlm.longest,
                      "total_tokens_qwen25": qwen25 + vlm.completion_tokens,
                      "cpu_s": statistics.median(seconds)}
    base = rows["off"]
    for row in rows.values():
        row["extra_tokens_qwen25"] = row["total_tokens_qwen25"] - base["total_tokens_qwen25"]
        row["cpu_vs_off"] = row["cpu_s"] / base["cpu_s"]
    print(f"Grounding cost: {args.frames} key frames of {width}x{height}, tiny Qwen2.5-VL on "
          f"CPU, replies {args.perception_tokens} tokens + {boxes} for the boxes; an image is "
          f"{per_image['tiny']} tokens here, {per_image['qwen25']} at Qwen2.5-VL's bounds")
    head = ("mode", "calls", "prompt tok", "prompt tok Q2.5", "completion", "longest reply",
            "extra tok Q2.5", "CPU s", "vs off")
    print(" | ".join(f"{h:>15s}" for h in head))
    for mode, row in rows.items():
        cells = (mode, row["vlm_calls"], row["prompt_tokens_tiny"], row["prompt_tokens_qwen25"],
                 row["completion_tokens"], row["longest_reply_tokens"],
                 row["extra_tokens_qwen25"], f"{row['cpu_s']:.2f}",
                 f"{row['cpu_vs_off']:.2f}x")
        print(" | ".join(f"{c!s:>15s}" for c in cells))
    ok = rows["reply"]["total_tokens_qwen25"] < rows["request"]["total_tokens_qwen25"]
    print(f"bound: reply costs fewer tokens than request at Qwen2.5-VL's bounds -> "
          f"{'OK' if ok else 'MISSED'}")
    write_figures(args.json, "grounding_cost", argv, args,
                  {"image_tokens": per_image, "box_tokens": boxes, "modes": rows, "ok": ok})
    tiny.close()
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
