"""``python -m lab.scripted_vlm``: an OpenAI-compatible VLM that answers from a synthetic
world's truth, for measuring grounding and perception against it.

The project's own server (:mod:`embodied_r_ros.serving`) serves a :class:`ScriptedVLM`, a chat
backend like any other: ``POST /v1/chat/completions`` (base64 image data URLs), ``GET
/v1/models`` and ``GET /health`` on loopback, with the server's request checks and OpenAI-style
error bodies. Each request's images are identified as frames of the world
(:mod:`lab.frame_match`) and the reply is written from those frames' truth
(:mod:`lab.scripted_replies`): boxes for a grounding prompt, the true action and what is in view
for Embodied-R's perception prompts. An image that is no frame of the world is a 400.

In-process (tests, benchmarks)::

    vlm = ScriptedVLM.for_world(world_dir_or_world, ScriptSettings(box_noise=0.05))
    with serve(vlm) as server:          # embodied_r_ros.serving.serve
        cfg = ModelConfig(backend="openai", model=vlm.model_id, base_url=server.url)

The truth is rendered once (a 30-minute long world: about 90 s) and kept in ``--cache``.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path

import numpy as np

from embodied_r_ros.backends.base import MAX_CHARS_PER_TOKEN, cut_at_stop
from embodied_r_ros.core.cancel import CancelToken
from embodied_r_ros.core.chat import (
    BackendError,
    ChatBackend,
    Completion,
    Conversation,
    InvalidConversation,
    ReplyFn,
    raise_if_stopped,
)
from embodied_r_ros.serving import OpenAIServer
from embodied_r_ros.serving.requests import RequestError
from embodied_r_ros.sim.world import World
from lab.frame_match import MAX_RMS, FrameMatcher, NotAFrame
from lab.long_world.world import LongWorld
from lab.scripted_replies import Scripter, ScriptSettings
from lab.truth_boxes import TruthTable, TruthWorld, load_world, truth_table, truth_world

log = logging.getLogger(__name__)

PROG = "python -m lab.scripted_vlm"
MODEL_ID = "scripted-vlm"
CACHE_NAME = "scripted_truth.npz"


class BadRequest(InvalidConversation, RequestError):
    """A request the scripted VLM cannot answer (no image, an image of another world): an HTTP
    400 through the server, an invalid conversation to a caller in the same process."""

    def __init__(self, message: str) -> None:
        InvalidConversation.__init__(self, message)
        self.status = 400


def request_parts(conversation: Conversation) -> tuple[str, list[np.ndarray]]:
    """The text (joined) and the images, in order, of every message of a conversation."""
    texts: list[str] = []
    images: list[np.ndarray] = []
    for message in conversation:
        content = message.get("content")
        if isinstance(content, str):
            texts.append(content)
            continue
        for part in content or []:
            if part.get("type") == "text":
                texts.append(part["text"])
            elif part.get("type") == "image":
                images.append(part["image"])
    return "\n".join(texts), images


class ScriptedVLM(ChatBackend):
    """A chat backend whose replies are a world's truth (see the module notes)."""

    supports_images = True
    concurrent = True  # replies are pure functions of the request: any thread, any order

    def __init__(self, scripter: Scripter, matcher: FrameMatcher,
                 model_id: str = MODEL_ID) -> None:
        self.scripter = scripter
        self.matcher = matcher
        self.model_id = model_id

    @classmethod
    def for_world(cls, world: TruthWorld | World | LongWorld | Path | str,
                  settings: ScriptSettings | None = None, *, cache: Path | str | None = None,
                  table: TruthTable | None = None, max_rms: float = MAX_RMS,
                  model_id: str = MODEL_ID) -> ScriptedVLM:
        """The scripted VLM of a world: a built one, or a generated directory; its truth is
        ``table``, else read from ``cache`` or rendered (and then saved there)."""
        if isinstance(world, Path | str):
            world = load_world(world)
        elif not isinstance(world, TruthWorld):
            world = truth_world(world)
        table = table if table is not None else truth_table(world, cache)
        if table.key != world.key:
            raise ValueError("the truth table is another world's")
        scripter = Scripter(world, table, settings or ScriptSettings())
        return cls(scripter, FrameMatcher(table.thumbs, max_rms), model_id)

    def frames(self, images: Sequence[np.ndarray]) -> list[int]:
        """The world frame of each image; :class:`BadRequest` for one that is none."""
        out = []
        for n, image in enumerate(images, 1):
            try:
                out.append(self.matcher.identify(image))
            except NotAFrame as exc:
                raise BadRequest(f"image {n} is not a frame of this world: {exc}") from None
        return out

    def reply(self, conversation: Conversation, seed: int | None = None) -> str:
        text, images = request_parts(conversation)
        if not images:
            raise BadRequest("the scripted VLM answers about frames of its world: the "
                             "request has no image")
        frames = self.frames(images)
        sizes = [(int(im.shape[1]), int(im.shape[0])) for im in images]
        return self.scripter.reply(text, frames, sizes, seed)

    def complete(
        self,
        conversations: Sequence[Conversation],
        *,
        max_new_tokens: int | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        seed: int | None = None,
        stop: Sequence[str] = (),
        cancel: CancelToken | None = None,
        on_reply: ReplyFn | None = None,
    ) -> list[Completion]:
        """One reply per conversation; ``seed`` (as a request's) varies the noise, the
        temperature and top-p change nothing: the script has no sampling."""
        out = []
        for i, conversation in enumerate(conversations):
            raise_if_stopped(cancel)
            text = self.reply(conversation, None if seed is None else seed + i)
            cut = cut_at_stop(text, stop)
            text = text if cut is None else cut
            limit = MAX_CHARS_PER_TOKEN * max_new_tokens if max_new_tokens else None
            length = limit is not None and len(text) > limit
            completion = Completion(text[:limit] if length else text,
                                    "length" if length else "stop")
            out.append(completion)
            if on_reply is not None:
                on_reply(i, completion)
        return out


# -- the command -------------------------------------------------------------------------------

def parser() -> argparse.ArgumentParser:
    d = ScriptSettings()
    p = argparse.ArgumentParser(prog=PROG, description="an OpenAI-compatible VLM that answers "
                                "from a synthetic world's truth (lab/README.md)")
    p.add_argument("--world", required=True,
                   help="a generated world directory (embodied-r world, python -m lab.long_world)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default loopback)")
    p.add_argument("--port", type=int, default=8000, help="port (0: a free one; default 8000)")
    p.add_argument("--model", default=MODEL_ID, help=f"model id served (default {MODEL_ID})")
    p.add_argument("--seed", type=int, default=d.seed, help="noise seed")
    p.add_argument("--box-noise", type=float, default=d.box_noise,
                   help="SD of each box edge as a fraction of the box's side (default 0.05)")
    p.add_argument("--miss-rate", type=float, default=d.miss_rate,
                   help="share of objects a grounding reply leaves out (default 0)")
    p.add_argument("--wrong-label-rate", type=float, default=d.wrong_label_rate,
                   help="share of objects given another object's name (default 0)")
    p.add_argument("--synonym-rate", type=float, default=d.synonym_rate,
                   help="share of the other objects called by a synonym or a broader word "
                        "(default 0)")
    p.add_argument("--min-share", type=float, default=d.min_share,
                   help=f"share of the image an object must cover to be seen (default "
                        f"{d.min_share:g})")
    p.add_argument("--max-objects", type=int, default=d.max_objects,
                   help="salient objects per grounding reply when the prompt gives no number "
                        f"(default {d.max_objects})")
    p.add_argument("--min-pixels", type=int, default=d.min_pixels,
                   help=f"the processor's lower pixel bound (default {d.min_pixels})")
    p.add_argument("--max-pixels", type=int, default=d.max_pixels,
                   help=f"the processor's upper pixel bound (default {d.max_pixels})")
    p.add_argument("--cache", default=None,
                   help=f"truth table file (default WORLD/{CACHE_NAME}; 'none': no file)")
    return p


def settings_from(args: argparse.Namespace) -> ScriptSettings:
    names = {f.name for f in fields(ScriptSettings)}
    return ScriptSettings(**{k: v for k, v in vars(args).items() if k in names}).validate()


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args = parser().parse_args(argv)
    cache = None if args.cache == "none" else Path(args.cache or Path(args.world) / CACHE_NAME)
    try:
        settings = settings_from(args)
        vlm = ScriptedVLM.for_world(args.world, settings, cache=cache, model_id=args.model)
        server = OpenAIServer(vlm, args.host, args.port)
    except (ValueError, BackendError, OSError) as exc:
        print(f"{PROG}: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    log.info("serving the scripted VLM of %s at %s", args.world, server.url)
    server.serve_until_stopped()
    return 0


if __name__ == "__main__":
    sys.exit(main())
