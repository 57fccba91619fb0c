"""Fault injection on a real CartPole PPO run (loopback only): what each fault costs and whether
the run recovers.

  python -m benchmarks.faults [--scenarios=actor_kill,attack,...]  (all by default)

Every scenario starts `learner.py` (configs/cartpole_ppo.py, metrics every second) and honest
`actor.py` processes in a fresh directory, with TLS and a certificate per actor (attackers hold
one certificate of their own; fuzz and silent_streams speak plaintext), lets the policy learn to a
robust return (episode_return_robust) of `--learned` (450; the maximum is 500), injects its fault
and reports:

  actor_kill      SIGKILL to one of two actors, restarted 5 s later as train.sh would: the partial
                  unrolls the server dropped (steps_dropped), env steps/s while it was gone,
                  seconds until it is connected again, and whether the return stayed learned.
  attack          a well-formed malicious actor (64 envs, random CartPole-like observations)
                  pays +10 for action 0 and -10 for action 1 for `--attack_s`; afterwards the
                  learner checkpoints and the policy plays 20 real CartPole episodes greedily.
  attack_capped   the same with server.max_identity_share = 0.34 (2 honest actors of 16 envs and
                  the attacker's 64: uncapped it would fill 2/3 of every batch).
  learner_kill    SIGKILL to the learner 25 s after it learned (checkpoint.interval_s 10), then
                  a new learner on the same port and logdir: env steps lost (last metrics row
                  before the kill minus the restored checkpoint), seconds until both actors are
                  back, and whether the return is back at --learned within 90 s.
  damaged_checkpoint  the learner stops (SIGTERM: a checkpoint), 64 bytes of the newest step's
                  array files are overwritten with random ones, the learner restarts: which step
                  it restored, and whether the return is back at --learned within 90 s; then the
                  same with the newest step's metadata file.
  stalled_actor   SIGSTOP to one of two actors for 75 s (longer than server.idle_timeout_s, 60):
                  env steps/s of the run before and during the stall, when the server closed the
                  stalled stream, and whether the actor rejoins after SIGCONT.
  fuzz            10,000 malformed messages on fresh streams (random bytes, and valid steps with
                  random bytes flipped) while two actors train: rejected streams, whether the
                  learner and the honest actors stayed up, and the return at the end.
  silent_streams  200 streams that reopen as soon as they end, half sending nothing and half a
                  Hello and then nothing (more than server.max_actors' 64 slots), then an honest
                  actor: seconds until it is connected (issue 33, finding 6).
  worst_actor     the defaults, one authenticated actor of three (4 streams of 64 envs, one
                  actor_id) sending the worst values the wire accepts for --worst_s (60 s):
                  observations of +-9.9e5, rewards of +9.9e5 for action 0 and -9.9e5 for action
                  1, fake episodes of 5 steps; the reported return during it, then the greedy
                  return over 20 real episodes (issue 33, findings 1-4).
  reward_flood    from the start, an actor of 1 env paid +-9.9e5 by action (about 3% of the
                  data) beside the two honest ones: env steps until the return reaches 450, or
                  the best return within 300k env steps (finding 2).
  fake_returns    stop_at_return=475 while an actor reports episodes of return 4,000 from the
                  start: when the run ends and the greedy return of what it learned (finding 3).
  capped_throughput  server.max_identity_share=0.25 with honest actors of 16 and 1 envs: policy
                  versions/s and honest steps lost, against no cap (finding 5).
  huge_actor      a third, honest actor with env.num_envs=4096 joins two of 16 envs for 60 s:
                  env steps/s, policy versions/s and staleness before and during, and the share
                  of one-second rows in which the run served under 1,000 env steps/s (finding 7).
  stop_in_update  SIGTERM while the learner is inside a long update (ppo.epochs=4000): seconds
                  until it has exited with its checkpoint (finding 8).
  identity_attack issue 59's attack: one certificate, 4 streams of 64 envs declaring 4 actor
                  ids, rewards of +-1e6 by action for --identity_attack_s (60): the robust return
                  during and after, loss/value against before, identities seen, greedy return.
  flood_two       identity_attack beside one honest actor: two identities, which no median can
                  tell apart (issue 76: every bound was off, loss/value reached 1.2e13).
  seat_lockout    server.max_actors=8; one certificate's 8 streams step without pause and
                  reconnect every 0.1 s; honest actor 1 killed and restarted 1 s later: seconds
                  until it is connected again (issue 76: refused for 60 s, then gave up).
  oversize        16 streams x 4,096 envs under one certificate beside two honest actors for
                  60 s: rows/s served to it against an honest identity's (issue 76: 10.8x).
  subtle_poison   one certificate's stream of 16 real CartPole envs that it steps with its own
                  controller (honest observations and episode lengths), paid 1 for the policy's
                  action 0 and 0 for action 1, for 150 s: the robust return
                  during, the greedy return after, and what the influence metrics saw (issue 76:
                  the honest return fell to 291-342).
  partition       learner and two actors each on a host of its own (network namespaces); actor
                  1 cut off for --partition_s (60 s; packets dropped, sockets open): when it
                  notices, when the learner frees its seats, when it is back after healing.
  learner_vanish  the learner's host cut off for good: an actor that waits and one that gives up
                  after 30 s (actor.give_up_s): when they notice, how the second one ends.
  learner_partition  two learner processes as one learner, each process and actor on a host of
                  its own; process 1's host cut off: how and when process 0 ends, then both
                  restarted with the same flags: whether they resume from the last checkpoint.

Issue 76's five attacks start 10 s after the run first reaches --learned, or with
--attack_from=settled once its robust return has stayed at 495 or more for 30 s.
Writes JSON (benchmarks/results/ or --out) and prints a Markdown table. The partition scenarios
need root (network namespaces) and fail saying so without. All 22 take about 40 minutes.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
from absl import app, flags

from benchmarks import results_io
from seedlike.testing import netns
from seedlike.testing.attacker import attack_streams

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SCENARIOS = (
    "actor_kill",
    "attack",
    "attack_capped",
    "learner_kill",
    "damaged_checkpoint",
    "stalled_actor",
    "fuzz",
    "silent_streams",
    "worst_actor",
    "reward_flood",
    "fake_returns",
    "capped_throughput",
    "stop_in_update",
    "huge_actor",
    "identity_attack",
    "flood_two",
    "seat_lockout",
    "oversize",
    "subtle_poison",
    "partition",
    "learner_vanish",
    "learner_partition",
)
_SCENARIOS = flags.DEFINE_list("scenarios", list(SCENARIOS), "Which scenarios to run.")
_LEARNED = flags.DEFINE_float("learned", 450.0, "Return that counts as learned.")
_ATTACK_S = flags.DEFINE_float("attack_s", 30.0, "How long the malicious actor plays.")
_WORST_S = flags.DEFINE_float("worst_s", 60.0, "How long worst_actor's attacker plays.")
_IDENTITY_S = flags.DEFINE_float(
    "identity_attack_s", 60.0, "How long identity_attack's attacker plays."
)
_ATTACK_FROM = flags.DEFINE_enum(
    "attack_from",
    "learned",
    ["learned", "settled"],
    "When issue 76's attacks (identity_attack, flood_two, seat_lockout, oversize, subtle_poison) "
    "start: 10 s after the return first reaches --learned, or once it has stayed at 495 or "
    "more for 30 rows (30 s) in a row.",
)
_PARTITION_S = flags.DEFINE_float("partition_s", 60.0, "How long partition cuts an actor off.")
_OUT = flags.DEFINE_string("out", None, "JSON output path.")
_ROOT = flags.DEFINE_string(
    "root", ROOT, "Checkout whose learner.py and actor.py run (another commit, to compare)."
)
_LEARNER_FLAGS = flags.DEFINE_list(
    "learner_flags",
    [],
    "Extra learner.py flags for every scenario (e.g. --config.server.front_ends=1).",
)

CONFIG = os.path.join(ROOT, "configs", "cartpole_ppo.py")
RETURN = "episode_return_robust"  # what decisions read (docs/metrics.md)
COMMON = [
    f"--config={CONFIG}",
    "--config.total_env_steps=100000000",
    "--config.log.interval_s=1",
    "--config.log.wandb_mode=disabled",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_credentials(directory: str, host: str, actors=(), attackers=("attacker",)) -> str:
    """A run's credentials for `host` (scripts/make_credentials.sh): certificates actor-<i> for
    each i in `actors`, and one per name in `attackers`."""
    script = os.path.join(ROOT, "scripts", "make_credentials.sh")
    names = [f"actor-{i}" for i in actors] + list(attackers)
    for args in ([directory, host], ["--actors", directory, *names]):
        subprocess.run([script, *args], check=True, capture_output=True)
    return directory


class Run:
    """A learner and its honest actors in a fresh logdir; every process is killed on close.

    secure (the default): TLS with a certificate per actor, as a run that takes actors from other
    machines has (docs/security.md): actor i is identity actor-<i>, and `attacker` streams (one
    certificate, "attacker") are one identity however many streams and actor ids they use.
    secure False: plaintext on loopback, every stream of this machine one identity."""

    def __init__(
        self, logdir: str, learner_flags=(), actors: int = 2, common=None, secure: bool = True
    ):
        self.logdir = logdir
        self.port = free_port()
        self.learner_flags = [*_LEARNER_FLAGS.value, *learner_flags]
        self.common = COMMON if common is None else common
        self.credentials = None
        self.actor_flags: list[str] = []
        if secure:
            self.credentials = make_credentials(
                os.path.join(logdir, "creds"), "localhost", range(8)
            )
            tls = f"--config.transport.credentials={self.credentials}"
            self.learner_flags.append(tls)
            self.actor_flags.append(tls)
        self.address = f"{'localhost' if secure else '127.0.0.1'}:{self.port}"
        self.procs: list[subprocess.Popen] = []
        self.learner = self.start_learner()
        for i in range(actors):
            self.start_actor(i)

    def spawn(self, args, log: str) -> subprocess.Popen:
        out = open(os.path.join(self.logdir, log), "ab")
        proc = subprocess.Popen(
            [sys.executable, *args], cwd=_ROOT.value, stdout=out, stderr=subprocess.STDOUT
        )
        self.procs.append(proc)
        return proc

    def start_learner(self) -> subprocess.Popen:
        args = ["learner.py", *self.common, f"--logdir={self.logdir}", f"--port={self.port}"]
        return self.spawn([*args, *self.learner_flags], "learner.log")

    def start_actor(self, actor_id: int, *flags_) -> subprocess.Popen:
        args = ["actor.py", *COMMON[:1], f"--server={self.address}", f"--actor_id={actor_id}"]
        return self.spawn([*args, *self.actor_flags, *flags_], f"actor_{actor_id}.log")

    def attack(self, seconds: float, streams: int, name: str = "attacker", **kwargs):
        """attack_streams under the certificate `name` (with credentials)."""
        return attack_streams(
            self.address, seconds, streams, credentials=self.attacker_credentials(name), **kwargs
        )

    def attacker_credentials(self, name: str = "attacker"):
        from seedlike.rpc import security

        return security.load(self.credentials or "", "client", name)

    def rows(self) -> list[dict]:
        path = os.path.join(self.logdir, "metrics.jsonl")
        if not os.path.exists(path):
            return []
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]

    def latest(self, key: str):
        return next((r[key] for r in reversed(self.rows()) if r.get(key) is not None), None)

    def wait(self, predicate, timeout: float, what: str) -> float:
        start = time.monotonic()
        while not predicate():
            if time.monotonic() - start > timeout:
                raise TimeoutError(f"{what}: not within {timeout:.0f} s (logs in {self.logdir})")
            if self.learner.poll() is not None:
                raise RuntimeError(f"the learner exited ({self.logdir}/learner.log)")
            time.sleep(0.25)
        return time.monotonic() - start

    def wait_learned(self, timeout: float = 180.0) -> float:
        return self.wait(lambda: (self.latest(RETURN) or 0) >= _LEARNED.value, timeout, "learn")

    def wait_attack_start(self) -> None:
        """Until the moment --attack_from names."""
        self.wait_learned()
        if _ATTACK_FROM.value == "learned":
            time.sleep(10)
            return

        def settled() -> bool:
            returns = [r.get(RETURN) for r in self.rows()[-30:]]
            return len(returns) == 30 and all((r or 0) >= 495 for r in returns)

        self.wait(settled, 300, "settle at 495")

    def settled_sps(self) -> float:
        """Env steps/s over the last 5 metrics rows, 5 s after the policy learned."""
        self.wait_learned()
        time.sleep(5)
        return mean_sps(self.rows()[-5:])

    def stop_learner(self) -> None:
        self.learner.send_signal(signal.SIGTERM)
        self.learner.wait(timeout=60)

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=30)


def mean_sps(rows) -> float | None:
    return float(np.mean([r["sps"] for r in rows])) if rows else None


def evaluate(logdir: str) -> float:
    from seedlike.launch.api import evaluate as play

    return play(logdir, episodes=20, greedy=True)["return_mean"]


def attack(workdir: str, capped: bool) -> dict:
    flags_ = ["--config.server.max_identity_share=0.34"] if capped else []
    run = Run(workdir, flags_)
    try:
        learned_s = run.wait_learned()
        before = run.latest(RETURN)
        threads, out = run.attack(_ATTACK_S.value, 1)
        for thread in threads:
            thread.join()
        capped_unrolls = run.latest("unrolls_capped")
        share = run.latest("identity_share_max")
        run.stop_learner()
        after = evaluate(workdir)
        return {
            "learned_after_s": round(learned_s, 1),
            "return_before": before,
            "attack_steps_sent": out.get("steps_sent"),
            "attacker_ended": out.get("ended", "no"),
            "unrolls_capped": capped_unrolls,
            "identity_share_max_last": share,
            "greedy_return_after_20_episodes": after,
            "recovered": after >= _LEARNED.value,
        }
    finally:
        run.close()


def learner_kill(workdir: str) -> dict:
    run = Run(workdir, ["--config.checkpoint.interval_s=10"])
    try:
        run.wait_learned()
        time.sleep(25)
        steps_at_kill = run.latest("env_steps")
        run.learner.kill()
        run.learner.wait(timeout=30)
        killed_at = time.monotonic()
        rows_before = len(run.rows())
        run.learner = run.start_learner()
        log = os.path.join(workdir, "learner.log")
        run.wait(lambda: "resumed from" in open(log).read(), 120, "restore after kill")
        restored = int(re.findall(r"resumed from .* at env step (\d+)", open(log).read())[-1])

        def back(key, test):
            rows = run.rows()[rows_before:]
            return any(r.get(key) is not None and test(r[key]) for r in rows)

        run.wait(lambda: back("actors_connected", lambda n: n >= 2), 120, "actors back after kill")
        actors_back = time.monotonic() - killed_at
        try:
            run.wait(lambda: back(RETURN, lambda r: r >= _LEARNED.value), 90, "x")
            recovered = True
        except TimeoutError:
            recovered = False
        return {
            "env_steps_at_kill": steps_at_kill,
            "env_steps_restored": restored,
            "env_steps_lost": steps_at_kill - restored,
            "actors_back_after_s": round(actors_back, 1),
            "recovered": recovered,
            "recovered_after_s": round(time.monotonic() - killed_at, 1) if recovered else None,
        }
    finally:
        run.close()


def actor_kill(workdir: str) -> dict:
    run = Run(workdir)
    try:
        before = run.settled_sps()
        dropped_before = run.latest("steps_dropped") or 0
        victim = run.procs[2]  # actor 1 (procs: learner, actor 0, actor 1)
        victim.kill()
        victim.wait(timeout=30)
        killed_at, mark = time.monotonic(), len(run.rows())
        time.sleep(5)
        alone = run.rows()[mark:]
        run.start_actor(1)
        mark = len(run.rows())
        run.wait(
            lambda: any(r.get("actors_connected") == 2 for r in run.rows()[mark:]),
            60,
            "the restarted actor connects",
        )
        back = time.monotonic() - killed_at
        time.sleep(10)
        after = run.rows()[mark:]
        returns = [r[RETURN] for r in alone + after if r[RETURN]]
        return {
            "sps_before": round(before, 0),
            "sps_one_actor": round(mean_sps(alone), 0),
            "steps_dropped": (run.latest("steps_dropped") or 0) - dropped_before,
            "connected_again_after_s": round(back, 1),
            "return_min_after_kill": min(returns) if returns else None,
            "stayed_learned": bool(returns) and min(returns) >= _LEARNED.value * 0.9,
        }
    finally:
        run.close()


def damaged_checkpoint(workdir: str) -> dict:
    run = Run(workdir, ["--config.checkpoint.interval_s=5"])
    checkpoints = os.path.join(workdir, "checkpoints")
    log = os.path.join(workdir, "learner.log")
    rng = np.random.default_rng(0)

    def newest() -> int:
        return max(int(d) for d in os.listdir(checkpoints) if d.isdigit())

    def restart() -> tuple[int, float | None, bool]:
        """Restarts the learner: (restored step, seconds until learned again, warned)."""
        rows_before, logged = len(run.rows()), len(open(log).read())
        start = time.monotonic()
        run.learner = run.start_learner()
        run.wait(lambda: "resumed from" in open(log).read()[logged:], 120, "restore")
        text = open(log).read()[logged:]
        restored = int(re.findall(r"policy version (\d+) \(params", text)[-1])
        try:
            run.wait(
                lambda: any(
                    (r.get(RETURN) or 0) >= _LEARNED.value for r in run.rows()[rows_before:]
                ),
                90,
                "return after restore",
            )
            back = round(time.monotonic() - start, 1)
        except TimeoutError:
            back = None
        return restored, back, "falling back" in text

    try:
        out = {}
        for part in ("data", "meta"):
            run.wait_learned()
            time.sleep(6)  # at least one periodic checkpoint before the final one
            run.stop_learner()
            step = newest()
            if part == "data":
                # The largest file of the step's state: array data (orbax's OCDBT chunks).
                state = os.path.join(checkpoints, str(step), "state")
                files = [os.path.join(d, f) for d, _, names in os.walk(state) for f in names]
                target = max(files, key=os.path.getsize)
                offset = os.path.getsize(target) // 2
            else:
                # The metadata: env steps, league, config (JSON).
                meta = os.path.join(checkpoints, str(step), "meta")
                target = next(os.path.join(meta, f) for f in os.listdir(meta))
                offset = 0
            with open(target, "r+b") as f:
                f.seek(offset)
                f.write(rng.integers(0, 256, 64, dtype=np.uint8).tobytes())
            restored, back, warned = restart()
            out[f"{part}_damaged_step"] = step
            out[f"{part}_damaged_file"] = os.path.relpath(target, checkpoints)
            out[f"{part}_restored_step"] = restored
            out[f"{part}_fell_back_with_warning"] = warned
            out[f"{part}_return_back_after_s"] = back
        return out
    finally:
        run.close()


def stalled_actor(workdir: str) -> dict:
    run = Run(workdir)
    try:
        before = run.settled_sps()
        stalled = run.procs[2]  # actor 1 (procs: learner, actor 0, actor 1)
        stalled.send_signal(signal.SIGSTOP)
        start, mark = time.monotonic(), len(run.rows())
        closed_after = None
        while time.monotonic() - start < 75:
            if (
                closed_after is None
                and "disconnected" in open(os.path.join(workdir, "learner.log")).read()
            ):
                closed_after = round(time.monotonic() - start, 1)
            time.sleep(0.5)
        during = run.rows()[mark:]
        stalled.send_signal(signal.SIGCONT)
        resumed = time.monotonic()
        run.wait(lambda: run.latest("actors_connected") == 2, 60, "the stalled actor rejoins")
        return {
            "sps_before": round(before, 0),
            "sps_during_first_20s": round(mean_sps(during[:20]), 0),
            "sps_during_after_close": round(mean_sps(during[-10:]), 0),
            "stream_closed_after_s": closed_after,
            "rejoined_after_sigcont_s": round(time.monotonic() - resumed, 1),
        }
    finally:
        run.close()


def fuzz(workdir: str) -> dict:
    import grpc

    from seedlike.config import load_config_file
    from seedlike.envs.envpool_env import make_env_spec
    from seedlike.rpc import codec
    from seedlike.rpc.codec import STREAM_METHOD

    run = Run(workdir, secure=False)
    try:
        run.wait_learned()
        spec = make_env_spec(load_config_file(CONFIG).env)
        hello = codec.pb.ActorMessage(hello=codec.make_hello(spec, 77, 4)).SerializeToString()
        rows = dict(
            obs={"obs": np.zeros((4, 4), np.float32)}, extras={}, reward=np.zeros(4, np.float32),
            terminated=np.zeros(4, bool), truncated=np.zeros(4, bool),
            env_id=np.arange(4, dtype=np.int32), player_id=np.zeros(4, np.int32),
            acting=np.ones(4, bool), game_over=np.zeros(4, bool),
        )  # fmt: skip
        from seedlike.types import Rows

        valid = codec.encode_step(0, Rows(**rows)).SerializeToString()
        rng = np.random.default_rng(0)
        codes: dict = {}
        channel = grpc.insecure_channel(run.address)
        method = channel.stream_stream(STREAM_METHOD)
        start = time.monotonic()
        for i in range(10_000):
            if i % 2:
                body = bytearray(valid)
                for at in rng.integers(0, len(body), 8):
                    body[at] = int(rng.integers(0, 256))
                messages = [hello, bytes(body)]
            else:
                messages = [rng.integers(0, 256, int(rng.integers(1, 400)), np.uint8).tobytes()]
            try:
                list(method(iter(messages), timeout=10))
                code = "OK"
            except grpc.RpcError as e:
                code = e.code().name
            codes[code] = codes.get(code, 0) + 1
        channel.close()
        seconds = time.monotonic() - start
        time.sleep(3)
        return {
            "messages": 10_000,
            "seconds": round(seconds, 1),
            "stream_outcomes": codes,
            "learner_alive": run.learner.poll() is None,
            "honest_actors_alive": all(p.poll() is None for p in run.procs[1:]),
            "actors_connected": run.latest("actors_connected"),
            "return_at_end": run.latest(RETURN),
        }
    finally:
        run.close()


def silent_streams(workdir: str) -> dict:
    import grpc

    from seedlike.config import load_config_file
    from seedlike.envs.envpool_env import make_env_spec
    from seedlike.rpc import codec

    run = Run(workdir, actors=0, secure=False)
    spec = make_env_spec(load_config_file(CONFIG).env)
    hello = codec.pb.ActorMessage(hello=codec.make_hello(spec, 55, 4)).SerializeToString()
    release = threading.Event()
    outcomes: list = []

    def silent(with_hello: bool):
        """Opens a stream that says nothing (or only Hello); reopens it as soon as it ends."""
        channel = grpc.insecure_channel(run.address)
        method = channel.stream_stream(codec.STREAM_METHOD)

        def requests():
            if with_hello:
                yield hello
            release.wait(120)

        while not release.is_set():
            try:
                for _ in method(requests()):
                    pass
                outcomes.append("OK")
            except grpc.RpcError as e:
                outcomes.append(e.code().name)
        channel.close()

    try:
        address_file = os.path.join(workdir, "server_address")
        run.wait(lambda: os.path.exists(address_file), 120, "learner start")
        threads = [threading.Thread(target=silent, args=(i % 2 == 1,)) for i in range(200)]
        for thread in threads:
            thread.start()
        time.sleep(10.0)  # every slot taken, streams reaped and reopened
        start = time.monotonic()
        honest = run.start_actor(0)
        log = os.path.join(workdir, "actor_0.log")
        try:
            run.wait(lambda: "connected to" in open(log).read(), 120, "honest actor")
            connected_s = round(time.monotonic() - start, 1)
        except TimeoutError:
            connected_s = None
        release.set()
        for thread in threads:
            thread.join(timeout=60)
        counts = {code: outcomes.count(code) for code in sorted(set(outcomes))}
        return {
            "honest_actor_connected_after_s": connected_s,
            "silent_stream_outcomes": counts,
            "honest_actor_alive": honest.poll() is None,
        }
    finally:
        release.set()
        run.close()


def worst_actor(workdir: str) -> dict:
    run = Run(workdir)
    try:
        run.wait(lambda: (run.latest(RETURN) or 0) >= 490, 300, "return 490")
        before = run.latest(RETURN)
        capped, scaled = run.latest("unrolls_capped") or 0, run.latest("rewards_scaled") or 0
        mark = len(run.rows())
        threads, out = run.attack(
            _WORST_S.value, 4, envs=64, obs_value=9.9e5, reward=9.9e5, episode=5
        )
        for thread in threads:
            thread.join()
        during = [r for r in run.rows()[mark:] if r.get(RETURN) is not None]
        returns = [r[RETURN] for r in during]
        run.stop_learner()
        after = evaluate(workdir)
        return {
            "return_before": before,
            "attack_s": _WORST_S.value,
            "attack_steps_sent": out.get("steps_sent"),
            "attacker_ended": out.get("ended", "no"),
            "reported_return_during_min": min(returns) if returns else None,
            "reported_return_during_max": max(returns) if returns else None,
            "staleness_max": max((r["staleness_mean"] or 0) for r in during) if during else None,
            "unrolls_capped": (run.latest("unrolls_capped") or 0) - capped,
            "rewards_scaled": (run.latest("rewards_scaled") or 0) - scaled,
            "greedy_return_after_20_episodes": after,
            "held": after >= 450,
        }
    finally:
        run.close()


def reward_flood(workdir: str) -> dict:
    run = Run(workdir)
    try:
        run.wait(lambda: run.latest("actors_connected") == 2, 120, "the honest actors")
        _, out = run.attack(600.0, 1, envs=1, reward=9.9e5, episode=100)
        steps = None
        try:
            run.wait(
                lambda: (
                    (run.latest(RETURN) or 0) >= _LEARNED.value
                    or (run.latest("env_steps") or 0) >= 300_000
                ),
                300,
                "learn or 300k steps",
            )
        except TimeoutError:
            pass
        rows = run.rows()
        reached = [r for r in rows if (r.get(RETURN) or 0) >= _LEARNED.value]
        if reached:
            steps = reached[0]["env_steps"]
        values = [r["loss/value"] for r in rows if r.get("loss/value") is not None]
        return {
            "env_steps_to_learned": steps,
            "best_return": max((r[RETURN] or 0) for r in rows),
            "env_steps": rows[-1]["env_steps"],
            "value_loss_max": max(values) if values else None,
            "attack_steps_sent": out.get("steps_sent"),
        }
    finally:
        run.close()


def fake_returns(workdir: str) -> dict:
    run = Run(workdir, ["--config.stop_at_return=475"])
    try:
        run.wait(
            lambda: os.path.exists(os.path.join(workdir, "server_address")), 120, "learner start"
        )
        start = time.monotonic()
        _, out = run.attack(600.0, 1, envs=16, reward=1000.0, episode=5, steer=False)
        code = run.learner.wait(timeout=900)
        ended_s = round(time.monotonic() - start, 1)
        log = open(os.path.join(workdir, "learner.log")).read()
        rows = run.rows()
        after = evaluate(workdir)
        return {
            "ended_after_s": ended_s,
            "exit_code": code,
            "training_complete": "training complete" in log or "stop_at_return" in log,
            "reported_return_at_end": rows[-1].get(RETURN) if rows else None,
            "env_steps_at_end": rows[-1].get("env_steps") if rows else None,
            "attacker_ended": out.get("ended", "no"),
            "greedy_return_after_20_episodes": after,
            "ended_honestly": after >= 400,
        }
    finally:
        run.close()


def capped_throughput(workdir: str) -> dict:
    out = {}
    for label, flags_ in (
        ("no_cap", []),
        ("cap_0.25", ["--config.server.max_identity_share=0.25"]),
    ):
        sub = os.path.join(workdir, label)
        os.makedirs(sub)
        run = Run(sub, flags_, actors=0)
        try:
            run.start_actor(0)
            run.start_actor(1, "--config.env.num_envs=1")
            run.wait(lambda r=run: r.latest("actors_connected") == 2, 120, "both actors")
            time.sleep(5)
            mark = len(run.rows())
            time.sleep(30)
            rows = run.rows()[mark - 1 :]
            seconds = rows[-1]["time"] - rows[0]["time"]
            out[label] = {
                "versions_per_s": round(
                    (rows[-1]["policy_version"] - rows[0]["policy_version"]) / seconds, 2
                ),
                "sps": round(mean_sps(rows[1:]), 0),
                "steps_dropped": rows[-1]["steps_dropped"] - rows[0]["steps_dropped"],
                "unrolls_capped": rows[-1]["unrolls_capped"] - rows[0]["unrolls_capped"],
            }
        finally:
            run.close()
    return out


def huge_actor(workdir: str) -> dict:
    run = Run(workdir)
    try:
        run.wait_learned()
        time.sleep(5)
        before = run.rows()[-10:]
        mark = len(run.rows())
        big = run.start_actor(2, "--config.env.num_envs=4096")
        time.sleep(60)
        during = run.rows()[mark:]
        big.kill()

        def versions_per_s(rows):
            return (rows[-1]["policy_version"] - rows[0]["policy_version"]) / max(
                rows[-1]["time"] - rows[0]["time"], 1e-9
            )

        return {
            "sps_before": round(mean_sps(before[1:]), 0),
            "sps_during": round(mean_sps(during[1:]), 0),
            "versions_per_s_before": round(versions_per_s(before), 2),
            "versions_per_s_during": round(versions_per_s(during), 2),
            "rows_under_1k_sps": f"{sum(r['sps'] < 1000 for r in during)} of {len(during)}",
            "staleness_max_during": round(max((r["staleness_mean"] or 0) for r in during), 1),
            "unrolls_capped": (run.latest("unrolls_capped") or 0),
            "return_min_during": min(
                (r[RETURN] for r in during if r[RETURN]),
                default=None,
            ),
        }
    finally:
        run.close()


def stop_in_update(workdir: str) -> dict:
    run = Run(workdir, ["--config.ppo.epochs=4000"], actors=1)
    try:
        run.wait(lambda: (run.latest("policy_version") or 0) >= 1, 300, "a first update")
        first = time.monotonic()
        run.wait(lambda: (run.latest("policy_version") or 0) >= 2, 300, "a second update")
        update_s = time.monotonic() - first
        start = time.monotonic()
        run.learner.send_signal(signal.SIGTERM)
        code = run.learner.wait(timeout=900)
        log = open(os.path.join(workdir, "learner.log")).read()
        return {
            "update_s": round(update_s, 1),
            "exit_after_sigterm_s": round(time.monotonic() - start, 1),
            "exit_code": code,
            "checkpoint_saved": "stop requested" in log,
            "update_abandoned": "abandoned at a stop request" in log,
        }
    finally:
        run.close()


def identity_attack(workdir: str, honest: int = 2) -> dict:
    """Issue 59's attack: one authenticated host, 4 streams of 64 envs declaring 4 actor ids,
    in-bound observations, rewards of +-1e6 by action for --identity_attack_s, against `honest`
    actors with certificates of their own."""
    run = Run(workdir, actors=honest)
    try:
        run.wait_attack_start()
        before = [r for r in run.rows() if r.get("loss/value") is not None]
        # Once CartPole plays 500 its value loss is ~0 (no termination to mispredict): the level
        # to compare with is what it reached while the run learned.
        value_before = max(r["loss/value"] for r in before)
        settled = float(np.median([r["loss/value"] for r in before[-10:]]))
        mark = len(run.rows())
        threads, out = run.attack(
            _IDENTITY_S.value, 4, distinct_ids=True, envs=64, reward=1e6, episode=100
        )
        for thread in threads:
            thread.join()
        during = run.rows()[mark:]
        time.sleep(10)
        after = run.rows()[mark + len(during) :]
        run.stop_learner()
        greedy = evaluate(workdir)

        def values(rows, key):
            return [r[key] for r in rows if r.get(key) is not None]

        robust = values(during + after, RETURN)
        value_max = max(values(during, "loss/value"), default=None)
        return {
            "attack_s": _IDENTITY_S.value,
            "attack_steps_sent": out.get("steps_sent"),
            "attacker_ended": out.get("ended", "no"),
            "identities_max": max(values(during, "episode_identities"), default=None),
            "robust_return_min": min(robust, default=None),
            "plain_return_min": min(values(during, "episode_return_mean"), default=None),
            "loss_value_before_max": round(value_before, 3),
            "loss_value_before_last10_median": round(settled, 5),
            "loss_value_during_median": float(np.median(values(during, "loss/value"))),
            "loss_value_during_max": value_max,
            "rewards_scaled": (run.latest("rewards_scaled") or 0),
            "greedy_return_after_20_episodes": greedy,
            "held": bool(robust)
            and min(robust) >= 450
            and value_max is not None
            and value_max <= 10 * value_before
            and greedy >= 450,
        }
    finally:
        run.close()


def flood_two(workdir: str) -> dict:
    return identity_attack(workdir, honest=1)


def seat_lockout(workdir: str) -> dict:
    run = Run(workdir, ["--config.server.max_actors=8"])
    try:
        run.wait_attack_start()
        threads, out = run.attack(
            60.0, 8, envs=16, reward=1.0, steer=False, episode=200, retry_s=0.1
        )
        time.sleep(10)  # every free seat is the attacker's
        log = os.path.join(workdir, "actor_1.log")
        connects = lambda: open(log, errors="replace").read().count("connected to")  # noqa: E731
        before = connects()
        run.procs[2].kill()  # the learner, actor 0, actor 1
        time.sleep(1.0)
        run.start_actor(1)
        back_s = _until(lambda: connects() > before, 60)
        mark = len(run.rows())
        for thread in threads:
            thread.join()
        after = run.rows()[mark:]
        return {
            "honest_back_in_s": back_s,
            "attacker_refused": out.get("refused", 0),
            "identities_after": max((r.get("episode_identities") or 0) for r in after),
            "robust_return_min_after": min(
                (r[RETURN] for r in after if r.get(RETURN)), default=None
            ),
            "held": back_s is not None and back_s <= 5,
        }
    finally:
        run.close()


def oversize(workdir: str) -> dict:
    run = Run(workdir)
    try:
        run.wait_attack_start()
        threads, out = run.attack(60.0, 16, envs=4096, reward=1.0, steer=False, episode=200)
        time.sleep(20)  # pacing measures a window first; then the steady state
        t0, sent0, mark = time.monotonic(), out.get("steps_sent", 0), len(run.rows())
        time.sleep(30)
        t1, sent1, during = time.monotonic(), out.get("steps_sent", 0), run.rows()[mark:]
        for thread in threads:
            thread.join()
        attacker = (sent1 - sent0) / (t1 - t0)
        honest_each = max(mean_sps(during[1:]) - attacker, 0.0) / 2
        p99 = [r["inference_latency_ms_p99"] for r in during if r.get("inference_latency_ms_p99")]
        return {
            "attacker_rows_per_s": round(attacker),
            "honest_rows_per_s_each": round(honest_each),
            "ratio": round(attacker / max(honest_each, 1e-9), 2),
            "latency_p99_ms_max": max(p99, default=None),
            "robust_return_min": min((r[RETURN] for r in during if r.get(RETURN)), default=None),
            "held": attacker <= 2.5 * honest_each,
        }
    finally:
        run.close()


def subtle_poison(workdir: str) -> dict:
    run = Run(workdir)
    try:
        run.wait_attack_start()
        mark = len(run.rows())
        threads, out = run.attack(150.0, 1, envs=16, real=True)
        for thread in threads:
            thread.join()
        during = run.rows()[mark:]
        run.stop_learner()
        greedy = evaluate(workdir)

        def values(key):
            return [r[key] for r in during if r.get(key) is not None]

        robust = values(RETURN)
        z_max, z_median = (
            values("influence/coherence_z_max"),
            values("influence/coherence_z_median"),
        )
        return {
            "attack_steps_sent": out.get("steps_sent"),
            "attacker_ended": out.get("ended", "no"),
            "robust_return_min": min(robust, default=None),
            "robust_return_last": robust[-1] if robust else None,
            "coherence_z_max_median": float(np.median(z_max)) if z_max else None,
            "coherence_z_median_median": float(np.median(z_median)) if z_median else None,
            "coherence_scale_min": min(values("influence/coherence_scale_min"), default=None),
            "greedy_return_after_20_episodes": greedy,
            "held": bool(robust) and min(robust) >= 450 and greedy >= 450,
        }
    finally:
        run.close()


class Hosts:
    """A learner and actors each on a host of its own (seedlike/testing/netns.py): run.procs
    spawn there."""

    def __init__(self, workdir: str, actors: int, learner_flags=(), actor_flags=()):
        why = netns.unavailable()
        if why is not None:
            raise RuntimeError(f"no separate hosts here: {why}")
        names = ["learner", *(f"actor{i}" for i in range(actors))]
        self.hosts = netns.Hosts(*names)
        self.procs: list[subprocess.Popen] = []
        try:
            self._start(workdir, actors, learner_flags, actor_flags)
        except BaseException:
            self.close()
            raise

    def _start(self, workdir, actors, learner_flags, actor_flags) -> None:
        self.workdir = workdir
        learner_ip = self.hosts.address["learner"]
        creds = make_credentials(os.path.join(workdir, "creds"), learner_ip, range(actors))
        tls = f"--config.transport.credentials={creds}"
        self.port = free_port()
        self.address = f"{learner_ip}:{self.port}"
        args = ["learner.py", *COMMON, f"--logdir={workdir}", f"--port={self.port}", tls]
        self.learner = self.spawn(
            "learner", [*args, f"--bind={learner_ip}", *learner_flags], "learner.log"
        )
        self.actors = [
            self.spawn(
                f"actor{i}",
                [
                    "actor.py",
                    COMMON[0],
                    f"--server={self.address}",
                    f"--actor_id={i}",
                    tls,
                    *actor_flags,
                ],
                f"actor_{i}.log",
            )  # fmt: skip
            for i in range(actors)
        ]
        self.run = Run.__new__(Run)  # rows, latest and wait of this logdir
        self.run.logdir, self.run.learner = workdir, self.learner

    def spawn(self, host: str, args, log: str) -> subprocess.Popen:
        with open(os.path.join(self.workdir, log), "ab") as out:  # the child keeps its own
            proc = subprocess.Popen(
                [*self.hosts.prefix(host), sys.executable, *args],
                cwd=_ROOT.value, stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        self.procs.append(proc)
        return proc

    def log(self, name: str) -> str:
        with open(os.path.join(self.workdir, name), errors="replace") as f:
            return f.read()

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=30)
        self.hosts.close()


def _until(predicate, timeout: float) -> float | None:
    """Seconds until predicate() holds, polled every 0.25 s; None if not within timeout."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if predicate():
            return round(time.monotonic() - start, 1)
        time.sleep(0.25)
    return None


def partition(workdir: str) -> dict:
    """Actor 1 of two, each on its own host, cut off (packets dropped both ways, no reset) for
    --partition_s: when it notices, when the learner frees its seats, then healed: when it is
    connected again and whether the run goes on learning."""
    hosts = Hosts(workdir, 2)
    run = hosts.run
    try:
        run.wait_learned(300)
        steps_before = run.latest("env_steps")
        hosts.hosts.partition("actor1")
        cut = time.monotonic()
        noticed = _until(lambda: "connection lost" in hosts.log("actor_1.log"), 60)
        freed = _until(lambda: run.latest("actors_connected") == 1, 120 - (time.monotonic() - cut))
        time.sleep(max(0.0, _PARTITION_S.value - (time.monotonic() - cut)))
        hosts.hosts.heal("actor1")
        healed = time.monotonic()
        back = _until(lambda: hosts.log("actor_1.log").count("connected to") >= 2, 120)
        mark = len(run.rows())
        time.sleep(15)
        after = [r[RETURN] for r in run.rows()[mark:] if r.get(RETURN) is not None]
        return {
            "partition_s": round(healed - cut, 1),
            "actor_noticed_after_s": noticed,
            "learner_freed_its_seats_after_s": None if freed is None else round(freed, 1),
            "reconnected_after_heal_s": back,
            "env_steps_during": run.latest("env_steps") - steps_before,
            "return_after_min": min(after, default=None),
            "held": noticed is not None
            and noticed <= 30
            and freed is not None
            and back is not None,
        }
    finally:
        hosts.close()


def learner_vanish(workdir: str) -> dict:
    """The learner's host cut off for good (power loss): actor 0 set to wait
    (actor.give_up_s 600), actor 1 to give up after 30 s; how each ends and in how many lines."""
    hosts = Hosts(workdir, 2)
    run = hosts.run
    try:
        run.wait_learned(300)
        hosts.actors[1].terminate()
        hosts.actors[1].wait(timeout=30)
        hosts.actors[1] = hosts.spawn(
            "actor1",
            ["actor.py", COMMON[0], f"--server={hosts.address}", "--actor_id=1",
             f"--config.transport.credentials={os.path.join(workdir, 'creds')}",
             "--config.actor.give_up_s=30"],
            "actor_1b.log",
        )  # fmt: skip
        run.wait(lambda: hosts.log("actor_1b.log").count("connected to") >= 1, 60, "actor 1 back")
        hosts.hosts.partition("learner")
        cut = time.monotonic()
        noticed = _until(lambda: "connection lost" in hosts.log("actor_0.log"), 60)
        exited = _until(lambda: hosts.actors[1].poll() is not None, 120)
        waiting = hosts.actors[0].poll() is None
        last_line = hosts.log("actor_1b.log").strip().splitlines()[-1]
        return {
            "actor_noticed_after_s": noticed,
            "giving_up_actor_exited_after_s": exited,
            "giving_up_actor_status": hosts.actors[1].returncode,
            "its_last_line": last_line[-200:],
            "waiting_actor_still_waiting": waiting,
            "tracebacks": sum(
                hosts.log(f).count("Traceback") for f in ("actor_0.log", "actor_1b.log")
            ),
            "seconds_since_cut": round(time.monotonic() - cut, 1),
        }
    finally:
        hosts.close()


def learner_partition(workdir: str) -> dict:
    """Two learner processes forming one learner (seedlike/runtime/distributed.py), each with
    one actor, every process on a host of its own; learner process 1's host is cut off for good:
    how and when process 0 ends, what process 1 does, then both restarted with the same flags
    (the cut healed): whether they resume from process 0's last checkpoint."""
    why = netns.unavailable()
    if why is not None:
        raise RuntimeError(f"no separate hosts here: {why}")
    job = _TwoLearners(workdir)
    run = Run.__new__(Run)
    run.logdir = workdir
    try:
        run.learner = job.learners("first")[0]
        for i in range(2):
            job.spawn(
                f"actor{i}",
                ["actor.py", COMMON[0], f"--server={job.ips[i]}:{job.ports[i]}",
                 f"--actor_id={i}", job.tls],
                f"actor_{i}.log",
            )  # fmt: skip
        run.wait(lambda: len(job.saved()) >= 2, 400, "two checkpoints")
        version = run.latest("policy_version")
        job.hosts.partition("learner1")
        first, second = job.procs[0], job.procs[1]
        ended = _until(lambda: first.poll() is not None, 240)
        last_line = _last_line(job.log("learner0_first.log"))
        second_ended = _until(lambda: second.poll() is not None, 30)
        newest = job.saved()[-1] if job.saved() else None
        job.kill()
        job.hosts.heal("learner1")
        restart = time.monotonic()
        again = job.learners("again")
        resumed = _until(lambda: "resumed from" in job.log("learner0_again.log"), 240)
        run.learner = again[0]
        restored = re.findall(r"resumed from .*", job.log("learner0_again.log"))
        second_log = job.log("learner1_first.log")
        return {
            "policy_version_at_cut": version,
            "process0_ended_after_s": ended,
            "process0_status": first.returncode,
            "process0_last_line": last_line[-300:],
            "process0_tracebacks": job.log("learner0_first.log").count("Traceback"),
            "process1_ended_within_30s_more": second_ended is not None,
            "process1_last_line": _last_line(second_log)[-300:],
            "process1_why": [
                line[:300]
                for line in second_log.splitlines()
                if line.startswith(("E1", "F1", "error:", "Fatal", "*** "))
            ][:6],
            "newest_checkpoint": newest,
            "restarted_resumed_after_s": resumed,
            "resumed_line": restored[-1][:200] if restored else None,
            "restart_s": round(time.monotonic() - restart, 1),
        }
    finally:
        job.kill()
        job.hosts.close()


def _last_line(text: str) -> str:
    return (text.strip().splitlines() or [""])[-1]


class _TwoLearners:
    """learner_partition's hosts (two learners, two actors, each a network namespace), their
    TLS credentials (the server certificate names both learner hosts), ports and processes."""

    def __init__(self, workdir: str):
        self.workdir = workdir
        self.hosts = netns.Hosts("learner0", "learner1", "actor0", "actor1")
        self.procs: list[subprocess.Popen] = []
        self.ips = [self.hosts.address["learner0"], self.hosts.address["learner1"]]
        try:
            creds = make_credentials(os.path.join(workdir, "creds"), self.ips[0], range(2))
            subprocess.run(
                [os.path.join(ROOT, "scripts", "make_credentials.sh"), "--rotate", creds,
                 *self.ips],
                check=True, capture_output=True,
            )  # fmt: skip
        except BaseException:
            self.hosts.close()
            raise
        self.tls = f"--config.transport.credentials={creds}"
        # A port each: the hosts share this machine's files, where a learner claims its port.
        self.ports = [free_port(), free_port()]

    def spawn(self, host: str, args, log: str) -> subprocess.Popen:
        with open(os.path.join(self.workdir, log), "ab") as out:  # the child keeps its own
            proc = subprocess.Popen(
                [*self.hosts.prefix(host), sys.executable, *args],
                cwd=_ROOT.value, stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        self.procs.append(proc)
        return proc

    def learners(self, tag: str) -> list[subprocess.Popen]:
        """Both learner processes, on their hosts, logging to learner<k>_<tag>.log."""
        return [
            self.spawn(
                f"learner{k}",
                [
                    "learner.py",
                    *COMMON,
                    f"--logdir={self.workdir}",
                    f"--port={self.ports[k]}",
                    f"--bind={self.ips[k]}",
                    self.tls,
                    "--config.checkpoint.interval_s=10",
                    "--config.distributed.num_processes=2",
                    f"--config.distributed.coordinator={self.ips[0]}:{self.ports[0] + 1}",
                    f"--config.distributed.process_id={k}",
                ],
                f"learner{k}_{tag}.log",
            )  # fmt: skip
            for k in range(2)
        ]

    def log(self, name: str) -> str:
        with open(os.path.join(self.workdir, name), errors="replace") as f:
            return f.read()

    def saved(self) -> list[int]:
        """The policy versions of the checkpoints process 0 saved."""
        checkpoints = os.path.join(self.workdir, "checkpoints")
        if not os.path.isdir(checkpoints):
            return []
        return sorted(int(d) for d in os.listdir(checkpoints) if d.isdigit())

    def kill(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=30)


def main(argv):
    del argv
    unknown = sorted(set(_SCENARIOS.value) - set(SCENARIOS))
    if unknown:
        raise app.UsageError(f"unknown scenarios {unknown}; choose from {list(SCENARIOS)}")
    results = {}
    for name in _SCENARIOS.value:
        with tempfile.TemporaryDirectory(prefix=f"faults-{name}-") as workdir:
            start = time.monotonic()
            if name == "attack":
                results[name] = attack(workdir, capped=False)
            elif name == "attack_capped":
                results[name] = attack(workdir, capped=True)
            else:
                results[name] = globals()[name](workdir)
            results[name]["scenario_s"] = round(time.monotonic() - start, 1)
        print(name, json.dumps(results[name]), flush=True)
    record = {"config": CONFIG, "attack_from": _ATTACK_FROM.value, "results": results}
    results_io.write("faults", record, _OUT.value, echo={})
    print("| scenario | result |\n| --- | --- |")
    for name, r in results.items():
        print(f"| {name} | " + ", ".join(f"{k} {v}" for k, v in r.items()) + " |")


if __name__ == "__main__":
    app.run(main)
