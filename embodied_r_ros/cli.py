"""``embodied-r``: key frames and spatial questions on video files, the synthetic world, serving.

Every user error ends as one line on stderr and exit code 2 (no traceback).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from embodied_r_ros.core.config import ConfigError, KeyframeConfig, ModelConfig
from embodied_r_ros.core.profiles import api_key_from_env, load_config

log = logging.getLogger("embodied_r")

EXIT_USAGE = 2


class CliError(Exception):
    """A user-facing error: printed as one line, exit code 2."""


class CliParser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, like every other user error
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see --help)\n")


def finite_float(text: str) -> float:
    """argparse type: a finite number (``inf``/``nan`` are refused, naming the option)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def port_number(text: str) -> int:
    """argparse type: a TCP port, 0..65535."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port {value} is not in 0..65535")
    return value


def _keyframe_config(args: argparse.Namespace) -> KeyframeConfig:
    values: dict[str, Any] = {}
    for key in ("sample_fps", "min_frames", "max_frames"):
        value = getattr(args, key)
        if value is not None:
            values[key] = value
    try:
        return KeyframeConfig(**values)
    except Exception as exc:  # pydantic ValidationError: name the option
        first = exc.errors()[0] if hasattr(exc, "errors") else {"loc": ("?",), "msg": str(exc)}
        key = ".".join(str(p) for p in first["loc"]) or "keyframes"
        raise CliError(f"--{key.replace('_', '-')}: {first['msg']}") from None


def cmd_keyframes(args: argparse.Namespace) -> int:
    from embodied_r_ros.core.keyframes import select_keyframes
    from embodied_r_ros.recordings.video import iter_frames

    cfg = _keyframe_config(args)
    selection = select_keyframes(iter_frames(args.path, args.input_fps), cfg)
    ms = 1000.0 * selection.extractor_seconds / max(selection.n_in, 1)
    if args.json:
        print(
            json.dumps(
                {
                    "indices": selection.indices,
                    "timestamps": [round(s, 6) for s in selection.stamps],
                    "frames_in": selection.n_in,
                    "ms_per_frame": round(ms, 3),
                }
            )
        )
    else:
        print(f"{len(selection.indices)} key frames of {selection.n_in} frames ({ms:.2f} ms/frame)")
        for idx, stamp in zip(selection.indices, selection.stamps, strict=True):
            print(f"  frame {idx:6d}  t={stamp:8.3f} s")
    return 0


def _load_pipeline_config(args: argparse.Namespace):  # noqa: ANN202 - Config
    if args.profile is None and args.config is None:
        args.profile = "offline"
    return load_config(profile=args.profile, path=args.config)


def cmd_ask(args: argparse.Namespace) -> int:
    from embodied_r_ros.backends.factory import load_pipeline
    from embodied_r_ros.core.request import validate_query
    from embodied_r_ros.recordings.video import iter_frames, probe_video

    # everything a user can get wrong is checked before the models load (seconds to minutes)
    question = validate_query(args.question, args.option or [])
    probe_video(args.video, args.input_fps)
    config = _load_pipeline_config(args)
    frames = iter_frames(args.video, args.input_fps)
    pipeline = load_pipeline(config)
    try:
        answer = pipeline.ask(frames, question)
    finally:
        pipeline.close()
    timings = {name: round(getattr(answer, name), 3)
               for name in ("keyframes_sec", "perception_sec", "reasoning_sec", "total_sec")}
    key_frames = [
        {"index": i, "stamp": round(s, 3)}
        for i, s in zip(answer.key_frame_indices, answer.key_frame_stamps, strict=False)
    ]
    if args.json:
        print(
            json.dumps(
                {
                    "answer": answer.answer,
                    "answer_text": answer.answer_text,
                    "reasoning": answer.reasoning,
                    "perception": answer.perception,
                    "key_frames": key_frames,
                    "timings": timings,
                    "profile": config.name,
                    "well_formed": answer.well_formed,
                }
            )
        )
        return 0
    print(f"profile: {config.name} - {config.description}")
    print(f"key frames ({len(key_frames)}): " + ", ".join(f"{k['stamp']}s" for k in key_frames))
    print("\n--- perception ---\n" + answer.perception)
    print("\n--- thinking ---\n" + (answer.reasoning or "(no <think> block)"))
    print("\n--- answer ---\n" + (answer.answer or "(none)") +
          (f". {answer.answer_text}" if answer.answer_text and question.options else ""))
    print("\n--- timings ---\n" + "  ".join(f"{k}={v}" for k, v in timings.items()))
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    config = _load_pipeline_config(args)
    model = config.reasoning.model if args.role == "lm" else config.perception.vlm
    if model is None:
        raise CliError(f"profile '{config.name}' has no VLM to serve (perception is geometric)")
    if args.api_key_env is not None:
        try:
            model = ModelConfig.model_validate({**model.model_dump(exclude_unset=True),
                                                "api_key_env": args.api_key_env})
        except ValueError as exc:
            raise CliError(f"--api-key-env: {args.api_key_env!r} is not a variable name") from exc
    serve_model(model, args.host, args.port, text_only=args.role == "lm", insecure=args.insecure)
    return 0


def serve_model(
    cfg: ModelConfig,
    host: str = "127.0.0.1",
    port: int = 8000,
    *,
    cache_dir: str | None = None,
    text_only: bool = False,
    insecure: bool = False,
) -> None:
    """Bind the port, then load the model of ``cfg`` and serve it until SIGINT or SIGTERM
    (``embodied-r serve``; either ends it cleanly, exit 0): a busy or invalid port, or a bind
    reachable from other machines without a key, fails before minutes of loading.
    ``text_only``: a text role (reasoning LM, consistency reference), see ``create_backend``.

    If ``cfg.api_key_env`` is set, clients must send that variable's value as a Bearer token;
    without one only a loopback address is served, unless ``insecure``.
    """
    from embodied_r_ros.backends.factory import create_backend
    from embodied_r_ros.serving import OpenAIServer

    api_key = api_key_from_env(cfg.api_key_env) if cfg.api_key_env else None
    server = OpenAIServer(None, host, port, api_key=api_key, insecure=insecure)
    try:
        backend = create_backend(cfg, cache_dir=cache_dir, text_only=text_only)
    except BaseException:
        server.shutdown()
        raise
    server.backend = backend
    log.info("serving %s at %s", backend.model_id, server.url)
    try:
        server.serve_until_stopped()
    finally:
        backend.close()


def build_parser() -> argparse.ArgumentParser:
    parser = CliParser(prog="embodied-r", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=CliParser)

    kf = sub.add_parser("keyframes", help="select Embodied-R key frames of a video or image folder")
    kf.add_argument("path", help="video file, or a folder of images sorted by name")
    kf.add_argument("--sample-fps", type=finite_float, default=None,
                    help="pre-sampling rate (0: all)")
    kf.add_argument("--input-fps", type=finite_float, default=1.0,
                    help="rate of an image folder")
    kf.add_argument("--min-frames", type=int, default=None, help="clamp lower bound (0: off)")
    kf.add_argument("--max-frames", type=int, default=None, help="clamp upper bound (0: off)")
    kf.add_argument("--json", action="store_true", help="print one JSON object")
    kf.set_defaults(func=cmd_keyframes)

    ask = sub.add_parser("ask", help="answer a spatial question about a video")
    ask.add_argument("video", help="video file, or a folder of images sorted by name")
    ask.add_argument("--question", "-q", required=True)
    ask.add_argument("--option", "-o", action="append", help='an option such as "A. left"')
    ask.add_argument("--input-fps", type=finite_float, default=1.0,
                     help="rate of an image folder")
    _add_profile_args(ask)
    ask.add_argument("--json", action="store_true", help="print one JSON object")
    ask.set_defaults(func=cmd_ask)

    serve = sub.add_parser("serve", help="serve a profile's model over an OpenAI-compatible API")
    _add_profile_args(serve)
    serve.add_argument("--role", choices=("vlm", "lm"), default="vlm")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=port_number, default=8000)
    serve.add_argument("--api-key-env", metavar="NAME", default=None,
                       help="clients must send this environment variable's value as a Bearer "
                            "token (overrides the model's api_key_env)")
    serve.add_argument("--insecure", action="store_true",
                       help="allow a non-loopback --host without an API key")
    serve.set_defaults(func=cmd_serve)

    _add_world(sub)
    from embodied_r_ros.memory.command import add_memory_parser

    add_memory_parser(sub)
    return parser


def _add_profile_args(p: argparse.ArgumentParser) -> None:
    group = p.add_mutually_exclusive_group()
    group.add_argument("--profile", "-p", help="tiny | offline | workstation | server | paper "
                       "| jetson, or a YAML file")
    group.add_argument("--config", "-c", help="a YAML config file")


def _add_world(sub: argparse._SubParsersAction) -> None:
    try:
        from embodied_r_ros.world_command import add_world_parser
    except ImportError:  # the simulator is optional for the core CLI
        return
    add_world_parser(sub)


def _user_errors() -> tuple[type[BaseException], ...]:
    from embodied_r_ros.core.chat import BackendError
    from embodied_r_ros.core.request import QueryError
    from embodied_r_ros.memory.errors import SpatialMemoryError
    from embodied_r_ros.recordings.video import VideoError

    return (CliError, ConfigError, VideoError, QueryError, BackendError, SpatialMemoryError)


def run_cli(
    prog: str,
    parser: argparse.ArgumentParser,
    user_errors: tuple[type[BaseException], ...],
    argv: Sequence[str] | None = None,
    quiet_level: int = logging.WARNING,
) -> int:
    """Parse, set up logging, run ``args.func``; user errors become one line and exit code 2.

    Shared by ``embodied-r`` and ``embodied-r-train``.
    """
    args = parser.parse_args(argv)
    verbose = getattr(args, "verbose", False)
    logging.basicConfig(
        level=logging.DEBUG if verbose else quiet_level,
        format="%(levelname)s %(name)s: %(message)s",
    )
    if not verbose and quiet_level >= logging.WARNING:
        # the answer (or the one-line error) is the output: no weight-loading bars
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except user_errors as exc:
        code = getattr(exc, "code", None)
        prefix = f"{code}: " if isinstance(code, str) and not str(exc).startswith(code) else ""
        print(f"{prog}: error: {prefix}{str(exc).splitlines()[0]}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130


def main(argv: Sequence[str] | None = None) -> int:
    return run_cli("embodied-r", build_parser(), _user_errors(), argv)


if __name__ == "__main__":
    sys.exit(main())
