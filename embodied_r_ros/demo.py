"""``make demo``: the robot-facing pipeline end to end on a plain machine, over real ROS 2.

1. makes the sample world (a rendered room: an MCAP bag with camera, odometry, and questions);
2. starts the all-in-one process (``python -m embodied_r_ros``, profile ``offline``);
3. plays the bag into it at real rate with the project's own player, pausing at the end of each
   question's time window to ask it over the real ``/embodied_r/query`` service;
4. prints each answer beside the true one, the accuracy, and the latency of every stage.

The offline profile's models are stand-ins, not the paper's 72B VLM and 3B LM: geometric
perception, and SmolLM2-135M with the adapter this project trained on synthetic rooms
(``smollm2-135m-embodied-r``). The summary gives the accuracy with its bootstrap interval and
the untrained model's figure on the same questions.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from embodied_r_ros.core.query_result import QueryResult

CAMERA, COMPRESSED, ODOM = "/camera/image_raw", "/camera/image_raw/compressed", "/odom"
SERVICE = "/embodied_r/query"
#: the untrained SmolLM2-135M-Instruct on the sample world's 30 questions with the offline
#: profile's settings (the timed perception text, llama.cpp float16, 320 new tokens), measured
#: with ``python -m embodied_r_ros.demo --config FILE`` where FILE sets
#: ``reasoning: {model: {model: smollm2-135m}}``: the figure the shipped reasoner is compared
#: with
UNTRAINED = {"model": "smollm2-135m", "correct": 5, "questions": 30}


@dataclass
class Row:
    id: str
    category: str
    t_end: float
    window_sec: float
    answer: str
    answer_text: str
    truth: str
    truth_text: str
    correct: bool
    error_code: str
    key_frames: int
    perception_sec: float
    reasoning_sec: float
    total_sec: float


def _env() -> dict[str, str]:
    """Loopback discovery on a private domain unless the user chose one."""
    env = dict(os.environ)
    env.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    env.setdefault("ROS_DOMAIN_ID", str(random.Random(os.getpid()).randint(30, 99)))
    return env


def _start_allinone(profile: str, config_file: str, log_path: Path,
                    env: dict[str, str]) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "embodied_r_ros", "--ros-args",
           "-p", f"profile:={profile}", "-p", "query_timeout_sec:=900.0",
           *(["-p", f"config_file:={config_file}"] if config_file else []),
           "-r", f"image:={CAMERA}", "-r", f"image/compressed:={COMPRESSED}", "-r", f"odom:={ODOM}",
           "--log-level", "warn"]
    log = log_path.open("w")
    return subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _options_line(options: Sequence[str]) -> str:
    return " | ".join(options)


def _summary(rows: list[Row], questions: list[dict[str, Any]], models: str,
             reasoner: str = "") -> str:
    from embodied_r_ros.intervals import bootstrap_ci

    answered = [r for r in rows if not r.error_code]
    correct = sum(r.correct for r in rows)
    chance = statistics.mean(1 / max(1, len(q["options"])) for q in questions) if questions else 0
    low, high = bootstrap_ci([float(r.correct) for r in rows])
    lines = ["", "=" * 78,
             f"Accuracy: {correct}/{len(rows)} = {100 * correct / max(1, len(rows)):.1f}% "
             f"[95% bootstrap interval {100 * low:.0f}-{100 * high:.0f}%] "
             f"(chance {100 * chance:.1f}%; {len(rows) - len(answered)} errors)"]
    if reasoner != UNTRAINED["model"] and len(rows) == UNTRAINED["questions"]:
        n, of = UNTRAINED["correct"], UNTRAINED["questions"]
        lines.append(f"Untrained {UNTRAINED['model']} on the same {of} questions: {n}/{of} = "
                     f"{100 * n / of:.1f}% (this demo with reasoning.model.model: "
                     f"{UNTRAINED['model']})")
    by_cat: dict[str, list[Row]] = defaultdict(list)
    for r in rows:
        by_cat[r.category].append(r)
    for cat, rs in sorted(by_cat.items()):
        lines.append(f"  {cat:<22} {sum(r.correct for r in rs)}/{len(rs)}")
    if answered:
        def stat(name: str) -> str:
            xs = [getattr(r, name) for r in answered]
            return f"median {statistics.median(xs):6.3f} s, max {max(xs):6.3f} s"

        overhead = [r.total_sec - r.perception_sec - r.reasoning_sec for r in answered]
        lines += ["Latency per question:",
                  f"  perception  {stat('perception_sec')}",
                  f"  reasoning   {stat('reasoning_sec')}",
                  f"  total       {stat('total_sec')}",
                  f"  overhead    median {statistics.median(overhead):6.3f} s (total minus models)"]
    lines += [f"Models: {models}.",
              "These are STAND-INS (no model hub here), not the paper's Qwen2.5-VL-72B + "
              "Qwen2.5-3B: geometric perception, and a 135M LM that this project trained on "
              "synthetic rooms like this one (its model card: "
              "embodied_r_ros/models/smollm2-135m-embodied-r/README.md). The accuracy "
              "shows what the training does for a small LM, not what Embodied-R does on video."]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from embodied_r_ros.agent.model_loading import describe_models
    from embodied_r_ros.core.config import ConfigError
    from embodied_r_ros.core.profiles import load_config
    from embodied_r_ros.reading.text_decides import TextDecides
    from embodied_r_ros.sim.generate import ensure_sample

    try:
        config = load_config(args.profile, args.config)
    except ConfigError as exc:
        print(f"demo: {exc}", file=sys.stderr)
        return 2
    models = describe_models(config)
    print(f"Embodied-R ROS 2 demo. Profile '{config.name}': {config.description}")
    print(f"Models: {models}  (stand-ins, see the end)")
    if args.world is not None:
        bag, questions_file = args.world / "bag", args.world / "questions.jsonl"
        if not bag.is_dir() or not questions_file.is_file():
            print(f"demo: {args.world} has no bag/ and questions.jsonl", file=sys.stderr)
            return 2
    else:
        print("Preparing the sample world (rendered once, then cached) ...", flush=True)
        paths = ensure_sample(args.sample_dir, decides=TextDecides)
        bag, questions_file = paths.bag, paths.questions
    questions = [json.loads(line) for line in questions_file.read_text().splitlines() if line]
    questions.sort(key=lambda q: (q["t_end"], q["id"]))
    if args.max_questions:
        questions = questions[: args.max_questions]
    env = _env()
    os.environ.update({k: env[k] for k in ("ROS_AUTOMATIC_DISCOVERY_RANGE", "ROS_DOMAIN_ID")})
    log_path = Path(tempfile.gettempdir()) / f"embodied_r_demo_{os.getpid()}.log"
    print(f"Starting the all-in-one process (log: {log_path}) ...", flush=True)
    proc = _start_allinone(args.profile, str(args.config or ""), log_path, env)
    try:
        return _play_and_ask(args, proc, bag, questions, models, log_path,
                             config.reasoning.model.model)
    finally:
        _stop(proc)


def _play_and_ask(args: argparse.Namespace, proc: subprocess.Popen, bag: Path,
                  questions: list[dict[str, Any]], models: str, log_path: Path,
                  reasoner: str) -> int:
    import rclpy

    from embodied_r_ros.client import SpatialQueryClient
    from embodied_r_ros.nodes.transport import use_large_frame_transport
    from embodied_r_ros.ros_player import BagPlayer

    use_large_frame_transport()  # this process publishes the raw frames
    context = rclpy.Context()
    rclpy.init(args=[], context=context)
    node = rclpy.create_node("embodied_r_demo", context=context)  # publishes only
    player = BagPlayer(node, bag, topics=[CAMERA, ODOM], rate=args.rate)
    client = SpatialQueryClient(SERVICE, context=context)
    rows: list[Row] = []
    try:
        deadline = time.monotonic() + args.startup_timeout
        while not client.wait_for_server(timeout=1.0):
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = log_path.read_text()[-3000:] if log_path.exists() else ""
                print(f"demo: the all-in-one process did not come up:\n{tail}", file=sys.stderr)
                return 1
        for topic in (CAMERA, ODOM):
            player.wait_for_subscribers(topic, 30.0)
        print(f"Playing {bag} ({player.info.duration_sec:.1f} s) at {args.rate:g}x real time, "
              f"asking {len(questions)} questions over {SERVICE}\n", flush=True)
        for q in questions:
            if player.position_ns < player.info.start_ns + round(q["t_end"] * 1e9):
                player.play(until_sec=q["t_end"])
                time.sleep(args.settle)  # the last frames reach the buffer
            window = round(q["t_end"] - q["t_start"], 3)
            try:
                answer = client.ask(q["question"], q["options"], window_sec=window,
                                    timeout=args.query_timeout)
            except TimeoutError:
                print(f"demo: no answer to {q['id']} in {args.query_timeout:g} s",
                      file=sys.stderr)
                return 1
            rows.append(_report(q, window, answer))
        print(_summary(rows, questions, models, reasoner))
        if args.json:
            Path(args.json).write_text(json.dumps([asdict(r) for r in rows], indent=1))
            print(f"Per-question results: {args.json}")
    finally:
        player.close()
        client.close()
        node.destroy_node()
        rclpy.try_shutdown(context=context)
    return 0 if rows and all(not r.error_code for r in rows) else 1


def _report(q: dict[str, Any], window: float, r: QueryResult) -> Row:
    truth_text = q.get("answer_text", "")
    row = Row(
        id=q["id"], category=q["category"], t_end=q["t_end"], window_sec=window,
        answer=r.answer, answer_text=r.answer_text, truth=q["answer"], truth_text=truth_text,
        correct=bool(r.success and r.answer == q["answer"]), error_code=r.error_code,
        key_frames=len(r.key_frame_stamps), perception_sec=r.perception_sec,
        reasoning_sec=r.reasoning_sec, total_sec=r.total_sec,
    )
    print(f"[t={q['t_end']:5.1f} s, window {window:4.1f} s] {q['id']} ({q['category']})")
    print(f"  Q: {q['question']}")
    print(f"     {_options_line(q['options'])}")
    if r.success:
        mark = "correct" if row.correct else "wrong"
        print(f"  model: {r.answer or '-'} ({r.answer_text or 'no option recognised'})   "
              f"truth: {q['answer']} ({truth_text})   {mark}")
        print(f"  {row.key_frames} key frames | perception {r.perception_sec:.3f} s | "
              f"reasoning {r.reasoning_sec:.3f} s | total {r.total_sec:.3f} s", flush=True)
    else:
        print(f"  error {r.error_code}: {r.error}   truth: {q['answer']}", flush=True)
    return row


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="offline", help="pipeline profile (default offline)")
    parser.add_argument("--config", type=Path, default=None,
                        help="YAML config layered over the profile")
    parser.add_argument("--sample-dir", type=Path, default=None,
                        help="where the sample world lives (default: ~/.cache/embodied_r/...)")
    parser.add_argument("--world", type=Path, default=None,
                        help="use this generated world (bag/ + questions.jsonl) instead")
    parser.add_argument("--rate", type=float, default=1.0, help="playback speed (1 = real rate)")
    parser.add_argument("--max-questions", type=int, default=0, help="ask only the first N")
    parser.add_argument("--settle", type=float, default=0.5,
                        help="seconds to let the last played frames reach the buffer")
    parser.add_argument("--startup-timeout", type=float, default=600.0)
    parser.add_argument("--query-timeout", type=float, default=900.0)
    parser.add_argument("--json", help="also write per-question results to this file")
    args = parser.parse_args(argv)
    return run(args)


if __name__ == "__main__":
    raise SystemExit(main())
