"""What makes the Nature CNN PPO update and inference fast or slow on XLA:CPU.

  .venv/bin/python benchmarks/conv_microbench.py --groups=formulations \
      --output=benchmarks/results/conv_microbench.json [--merge]

Times the baseline trainer's own network, PPO loss and optimizer (benchmarks/baseline_ppo_atari.py):
  sgd:   one jitted PPO sgd step (forward + backward + Adam update) on a minibatch of 256 uint8
         frames [256, 4, 84, 84] (per step: a call of a 4-step formulation counts as 4 steps);
  infer: the jitted forward pass (logits and value) on batches of 8, 16, 32 and 64 frames.

A variant is "formulation@flag_set". FORMULATIONS change one thing against `baseline` (envpool's
NCHW frames transposed inside the network, lax.conv for every conv, float32, one jitted step per
call, no donation): (a) NHWC frames in; (b) the strided convs as space-to-depth + stride-1 conv, or
as im2col + matmul; (c) bfloat16 compute; (e) a Python loop of 4 jitted steps vs one jitted
lax.scan over 4 steps; (f) donating the train state. FLAG_SETS are (d) XLA:CPU options, given per
compilation (`compiler_options`, the same DebugOptions fields XLA_FLAGS sets), so that all variants
of a group run in one process and are timed round-robin, one call of each in turn: load from other
work on the machine then falls on all of them alike. Each group runs in its own child process and
reports speedups against its own `baseline@default`. GROUPS: formulations (a, b, c, e-loop, f under
the default and the YNNPACK-convolutions-off options), scan_default and scan_ynn_conv_off (e; the
slow ones take minutes), flags (d), best (the fastest candidates side by side), per_conv (each
conv's forward, kernel gradient and input gradient alone). Each group takes 1-4 minutes here.

Every variant marked exact computes the same function as the baseline from the same parameters
(only floating-point summation order differs); the child checks this numerically (`checks` and each
variant's `max_abs_diff_*`). The compiled HLO of each sgd step is summarized (convolutions, dots,
fusions handed to the YNNPACK / XNNPACK / oneDNN libraries, while loops) so that a flag's effect
can be seen. Prints a table of median ms per call and writes everything to --output (with --merge,
groups already there that were not rerun are kept).
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time

import numpy as np
from absl import app, flags

# The parent process never imports jax: it spawns one child process per group and formats.
_GROUPS = flags.DEFINE_list("groups", ["formulations"], "Which GROUPS to run, in order.")
# Not --out: the child imports baseline_ppo_atari, whose module-level flags include --out.
_OUT = flags.DEFINE_string(
    "output",
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "conv_microbench.json"),
    "Output JSON path.",
)
_MERGE = flags.DEFINE_bool(
    "merge", False, "Keep the groups already in --output that are not rerun."
)
_REPEATS = flags.DEFINE_integer("repeats", 15, "Timed calls per sgd variant (at most).")
_INFER_REPEATS = flags.DEFINE_integer("infer_repeats", 40, "Timed calls per inference variant.")
_BUDGET_S = flags.DEFINE_float(
    "budget_s",
    20.0,
    "Timing budget per variant: a slow call gets budget_s / its time repeats (at least 3, or 2 "
    "for calls over SLOW_CALL_S).",
)
_CHILD_GROUP = flags.DEFINE_string("child_group", None, "Internal: run this group in-process.")
_CHILD_OUT = flags.DEFINE_string("child_out", None, "Internal: where the child writes its JSON.")

MINIBATCH = 256
STEPS_PER_CALL = 4  # of the loop4 / scan4 variants
INFER_BATCHES = (8, 16, 32, 64)
NUM_ACTIONS = 4  # Breakout
MIN_REPEATS = 3
# A variant whose warm-up call takes longer than this (the scan pitfall: tens of seconds) is timed
# MIN_REPEATS - 1 times; its slowdown is far larger than the noise.
SLOW_CALL_S = 5.0
REFERENCE = "baseline@default"
PER_CONV = "per_conv"

_YNN = "xla_cpu_experimental_ynn_fusion_type"
_XNN = "xla_cpu_experimental_xnn_fusion_type"
# This jaxlib's default YNNPACK list is INDIVIDUAL_CONVOLUTION, INDIVIDUAL_DOT and REDUCE (read
# off the compiled HLO); overwriting it without INDIVIDUAL_CONVOLUTION equals the XLA_FLAGS form
# --xla_cpu_experimental_ynn_fusion_type=-individual_convolution (and is the value of
# baseline_ppo_atari.YNN_WITHOUT_CONVOLUTIONS, which the parent does not import).
_YNN_CONV_OFF = {_YNN: "LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT,LIBRARY_FUSION_TYPE_REDUCE"}

# XLA:CPU options (DebugOptions fields, found with `strings libjax_common.so | grep xla_cpu_`),
# passed per compilation as `compiler_options`, so that every setting can be timed in one process
# and interleaved with the others. xla_cpu_use_thunk_runtime, the old switch between runtimes, is
# gone from this jaxlib ("no longer supported" in XLA_FLAGS, "no such compile option" here).
FLAG_SETS: dict[str, tuple[dict, bool, str]] = {
    # name: (options, exact (only summation order may change), what it does)
    "default": ({}, True, "this jaxlib's defaults: convolutions, dots and reductions to YNNPACK"),
    "ynn_conv_off": (_YNN_CONV_OFF, True, "convolutions to XLA's own (Eigen) kernels"),
    "ynn_off": ({_YNN: ""}, True, "nothing to YNNPACK: dots and reductions to XLA/Eigen too"),
    "xnn_conv": (
        {**_YNN_CONV_OFF, _XNN: "LIBRARY_FUSION_TYPE_INDIVIDUAL_CONVOLUTION"},
        True,
        "convolutions offered to XNNPACK instead",
    ),
    "xnn_graph": (
        {
            **_YNN_CONV_OFF,
            _XNN: "LIBRARY_FUSION_TYPE_DOT,LIBRARY_FUSION_TYPE_ELTWISE,LIBRARY_FUSION_TYPE_REDUCE",
            "xla_cpu_experimental_xnn_graph_fusion_mode": "XNN_GRAPH_FUSION_MODE_GREEDY",
        },
        True,
        "XNNPACK graph fusion of dots, elementwise ops and reductions",
    ),
    "onednn": (
        {
            **_YNN_CONV_OFF,
            "xla_cpu_use_onednn": True,
            "xla_cpu_experimental_onednn_custom_call": True,
        },
        True,
        "ask for oneDNN custom calls",
    ),
    "eigen_1thread": (
        {**_YNN_CONV_OFF, "xla_cpu_multi_thread_eigen": False},
        True,
        "Eigen convolutions single-threaded",
    ),
    "default_1thread": (
        {"xla_cpu_multi_thread_eigen": False},
        True,
        "defaults, Eigen single-threaded",
    ),
    "fast_math": (
        {**_YNN_CONV_OFF, "xla_cpu_enable_fast_math": True},
        False,
        "LLVM fast math in XLA's own fusions",
    ),
    "no_fusion_emitters": (
        {**_YNN_CONV_OFF, "xla_cpu_use_fusion_emitters": False},
        True,
        "legacy elemental emitters for fusions",
    ),
    "concurrency_scheduler": (
        {**_YNN_CONV_OFF, "xla_cpu_enable_concurrency_optimized_scheduler": True},
        True,
        "schedule independent ops to run concurrently",
    ),
    "vector_width_512": (
        {**_YNN_CONV_OFF, "xla_cpu_prefer_vector_width": 512},
        True,
        "512-bit vectors in generated code",
    ),
}


@dataclasses.dataclass(frozen=True)
class Formulation:
    """How the update is written; see the module docstring for what each field changes."""

    description: str
    obs_layout: str = "NCHW"
    conv_impl: str | tuple[str, str, str] = "conv"  # a baseline_ppo_atari.NatureCNN conv_impl
    dtype: str = "float32"
    # single: one step per call; loop4: 4 jitted calls; scan4: lax.scan (a while loop);
    # scan4_unrolled: lax.scan(unroll=True), i.e. 4 copies of the step and no loop.
    steps: str = "single"
    donate: bool = False
    exact: bool = True  # the same function as the baseline (summation order aside)

    @property
    def steps_per_call(self) -> int:
        return 1 if self.steps == "single" else STEPS_PER_CALL

    @property
    def has_inference(self) -> bool:
        return self.steps == "single" and not self.donate


FORMULATIONS = {
    "baseline": Formulation("NCHW in, transpose inside, lax.conv, float32"),
    "nhwc_input": Formulation("(a) frames already NHWC, no transpose", obs_layout="NHWC"),
    "s2d_first": Formulation(
        "(b) first conv as space-to-depth 21x21x64 + 2x2 conv",
        conv_impl=("space_to_depth", "conv", "conv"),
    ),
    "s2d_second": Formulation(
        "(b) second conv as space-to-depth 10x10x128 + 2x2 conv",
        conv_impl=("conv", "space_to_depth", "conv"),
    ),
    "s2d": Formulation("(b) both strided convs as space-to-depth", conv_impl="space_to_depth"),
    "nhwc_s2d": Formulation("(a)+(b) NHWC in, both strided convs s2d", "NHWC", "space_to_depth"),
    "matmul": Formulation("(b') s2d, then im2col + one matmul per conv", conv_impl="matmul"),
    "mm_first_s2d_second": Formulation(
        "(b') first conv matmul, second s2d, third conv",
        conv_impl=("matmul", "space_to_depth", "conv"),
    ),
    "bf16": Formulation("(c) bfloat16 compute, float32 params", dtype="bfloat16", exact=False),
    "bf16_s2d": Formulation(
        "(c) bfloat16 + both strided convs s2d",
        conv_impl="space_to_depth",
        dtype="bfloat16",
        exact=False,
    ),
    "loop4": Formulation("(e) Python loop of 4 jitted steps", steps="loop4"),
    "scan4": Formulation("(e) one jitted lax.scan over 4 steps", steps="scan4"),
    "scan4_s2d": Formulation(
        "(e) lax.scan over 4 steps, s2d convs", conv_impl="space_to_depth", steps="scan4"
    ),
    "scan4_matmul": Formulation(
        "(e) lax.scan over 4 steps, matmul convs", conv_impl="matmul", steps="scan4"
    ),
    "scan4_unrolled": Formulation(
        "(e) lax.scan over 4 steps, fully unrolled", steps="scan4_unrolled"
    ),
    "donate": Formulation("(f) train state donated to the jitted step", donate=True),
    "s2d_donate": Formulation(
        "(b)+(f) s2d convs, state donated", conv_impl="space_to_depth", donate=True
    ),
}


def _cross(formulations, flag_sets) -> tuple[str, ...]:
    return tuple(f"{f}@{s}" for s in flag_sets for f in formulations)


_SINGLE = tuple(name for name, f in FORMULATIONS.items() if not f.steps.startswith("scan4"))
_SCAN = ("loop4", "scan4", "scan4_s2d", "scan4_matmul", "scan4_unrolled")
_OTHER_FLAGS = tuple(s for s in FLAG_SETS if s not in ("default", "ynn_conv_off"))

# Each group runs in one child process; its variants ("formulation@flag_set") are interleaved.
# Every group includes REFERENCE, and speedups are relative to the group's own REFERENCE.
GROUPS = {
    "formulations": _cross(_SINGLE, ("default", "ynn_conv_off")),
    "scan_default": (REFERENCE, *_cross(_SCAN, ("default",))),
    "scan_ynn_conv_off": (REFERENCE, *_cross(_SCAN, ("ynn_conv_off",))),
    "flags": _cross(("baseline", "s2d"), ("default", "ynn_conv_off", *_OTHER_FLAGS)),
    # The candidates for the fastest exact update, side by side.
    "best": (
        REFERENCE,
        *_cross(
            ("baseline", "s2d", "s2d_second", "matmul", "mm_first_s2d_second", "bf16_s2d"),
            ("ynn_conv_off",),
        ),
        *_cross(("matmul", "mm_first_s2d_second"), ("ynn_off",)),
    ),
    PER_CONV: (),  # run_per_conv: each conv alone
}


def parse_variant(name: str) -> tuple[str, Formulation, str, dict, bool]:
    """Splits "formulation@flag_set" into (name, Formulation, flag set, options, exact)."""
    formulation, flag_set = name.split("@")
    options, exact_flags, _ = FLAG_SETS[flag_set]
    f = FORMULATIONS[formulation]
    return formulation, f, flag_set, options, f.exact and exact_flags


# ---------------------------------------------------------------------------------------------
# Child process: everything below that touches jax runs only there.


def _hlo_summary(hlo_text: str) -> dict:
    """Counts the ops that decide where the time goes in compiled CPU HLO."""
    return {
        "convolution": len(re.findall(r" convolution\(", hlo_text)),
        "dot": len(re.findall(r" dot\(", hlo_text)),
        "ynn_fusion": hlo_text.count('"__ynn_fusion"'),
        "xnn_fusion": hlo_text.count('"__xnn_fusion"'),
        "onednn_custom_call": len(re.findall(r'custom_call_target="__onednn', hlo_text)),
        "while": len(re.findall(r" while\(", hlo_text)),
        "transpose": len(re.findall(r" transpose\(", hlo_text)),
    }


def _flops(compiled) -> float | None:
    cost = compiled.cost_analysis()
    if isinstance(cost, list | tuple):
        cost = cost[0] if cost else None
    return float(cost["flops"]) if cost and "flops" in cost else None


def _time_round_robin(calls: dict, repeats: int, budget_s: float) -> dict[str, list[float]]:
    """Times calls[name]() in turns; a call slower than budget_s / repeats gets fewer repeats."""
    import jax

    times = {name: [] for name in calls}
    target = dict.fromkeys(calls, repeats)
    for _ in range(repeats):
        for name, call in calls.items():
            if len(times[name]) >= target[name]:
                continue
            start = time.perf_counter()
            jax.block_until_ready(call())
            elapsed = time.perf_counter() - start
            times[name].append(elapsed)
            if len(times[name]) == 1:
                least = MIN_REPEATS - 1 if elapsed > SLOW_CALL_S else MIN_REPEATS
                target[name] = max(least, min(repeats, int(budget_s / elapsed)))
    return times


def _calibrate_ms(repeats: int = 20) -> float:
    """Median ms of a fixed numpy (not XLA) matmul: how busy the machine was during a group."""
    a = np.random.default_rng(0).standard_normal((512, 512), np.float32)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        a @ a
        times.append(time.perf_counter() - start)
    return float(np.median(times) * 1e3)


def _stats_ms(seconds: list[float], per_call: int = 1) -> dict:
    ms = np.asarray(seconds) * 1e3 / per_call
    return {
        "median_ms": float(np.median(ms)),
        "p25_ms": float(np.percentile(ms, 25)),
        "p75_ms": float(np.percentile(ms, 75)),
        "n": len(ms),
    }


def _max_abs(a, b) -> float:
    import jax

    diffs = jax.tree.map(lambda x, y: float(np.max(np.abs(np.asarray(x) - np.asarray(y)))), a, b)
    return max(jax.tree.leaves(diffs))


def run_group(names: tuple[str, ...], repeats: int, infer_repeats: int, budget_s: float) -> dict:
    """Compiles and times the named variants ("formulation@flag_set") in this process."""
    import jax
    import jax.numpy as jnp

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import baseline_ppo_atari as base  # noqa: I001 (found through the sys.path entry above)
    from seedlike.algos.batches import SampleBatch

    config = base.PPOConfig()
    optimizer = base.make_optimizer(config)
    rng = np.random.default_rng(0)
    n = STEPS_PER_CALL * MINIBATCH
    obs_nchw = rng.integers(0, 256, (n, 4, 84, 84), dtype=np.uint8)
    batch_nchw = SampleBatch(
        obs={"obs": obs_nchw},
        extras={},
        action=rng.integers(0, NUM_ACTIONS, n).astype(np.int32),
        behaviour_logp=np.log(rng.uniform(0.1, 0.5, n)).astype(np.float32),
        behaviour_value=rng.normal(size=n).astype(np.float32),
        advantage=rng.normal(size=n).astype(np.float32),
        value_target=rng.normal(size=n).astype(np.float32),
        mask=np.ones(n, np.float32),
    )
    batches = {
        "NCHW": batch_nchw,
        "NHWC": batch_nchw._replace(obs={"obs": obs_nchw.transpose(0, 2, 3, 1).copy()}),
    }

    # [STEPS_PER_CALL, MINIBATCH, ...] stacks for the 4-step variants, device-resident.
    def stack(x):
        return x.reshape(STEPS_PER_CALL, -1, *x.shape[1:])

    stacked = {layout: jax.device_put(jax.tree.map(stack, b)) for layout, b in batches.items()}
    minibatches = {
        layout: [jax.tree.map(lambda x, i=i: x[i], s) for i in range(STEPS_PER_CALL)]
        for layout, s in stacked.items()
    }

    def module(f: Formulation):
        dtype = jnp.bfloat16 if f.dtype == "bfloat16" else jnp.float32
        return base.AtariActorCritic(NUM_ACTIONS, f.obs_layout, f.conv_impl, dtype)

    # One set of parameters for all variants: the parameter trees are identical by construction.
    # The reference results come from the baseline under default options.
    baseline = module(FORMULATIONS["baseline"])
    params = baseline.init(jax.random.PRNGKey(0), obs_nchw[:1])
    state0 = base.TrainState(params=params, opt_state=optimizer.init(params))
    ref_forward = jax.jit(baseline.apply)(params, obs_nchw[:MINIBATCH])
    ref_step = jax.jit(base.make_sgd_step(baseline, config, optimizer))
    ref_state, _ = ref_step(state0, minibatches["NCHW"][0])

    calibration_before_ms = _calibrate_ms()
    results, sgd_calls, infer_calls = {}, {}, {}
    for name in names:
        _, f, flag_set, options, exact = parse_variant(name)
        mod = module(f)
        step = base.make_sgd_step(mod, config, optimizer)
        donate = (0,) if f.donate else ()
        mbs = minibatches[f.obs_layout]
        fresh = jax.tree.map(jnp.copy, state0)  # donation consumes it
        start = time.perf_counter()
        if f.steps.startswith("scan4"):
            unroll = f.steps == "scan4_unrolled"

            def scanned(s, b, step=step, unroll=unroll):
                return jax.lax.scan(step, s, b, unroll=unroll)

            lowered = jax.jit(scanned, donate_argnums=donate).lower(fresh, stacked[f.obs_layout])
        else:
            lowered = jax.jit(step, donate_argnums=donate).lower(fresh, mbs[0])
        compiled = lowered.compile(compiler_options=options)
        row = {
            "formulation": dataclasses.asdict(f),
            "flag_set": flag_set,
            "compiler_options": options,
            "exact": exact,
            "sgd_compile_s": time.perf_counter() - start,
            "sgd_flops_per_call": _flops(compiled),
            "sgd_hlo": _hlo_summary(compiled.as_text()),
        }

        # Exactness, measured: the forward pass and the first step against the reference (the
        # multi-step formulations reuse a network checked in a single-step one).
        if f.has_inference:
            obs = jax.device_put(batches[f.obs_layout].obs["obs"][:MINIBATCH])
            forward = jax.jit(mod.apply).lower(params, obs).compile(compiler_options=options)
            row["max_abs_diff_forward"] = _max_abs(forward(params, obs), ref_forward)
        if f.steps == "single":
            one_state, _ = compiled(jax.tree.map(jnp.copy, state0), mbs[0])
            row["max_abs_diff_params_after_step"] = _max_abs(one_state.params, ref_state.params)
        results[name] = row

        holder = {"state": fresh}
        if f.steps == "single":

            def call(compiled=compiled, holder=holder, mb=mbs[0]):
                holder["state"], metrics = compiled(holder["state"], mb)
                return metrics

        elif f.steps == "loop4":

            def call(compiled=compiled, holder=holder, mbs=mbs):
                for mb in mbs:
                    holder["state"], metrics = compiled(holder["state"], mb)
                return metrics

        else:

            def call(compiled=compiled, holder=holder, batch=stacked[f.obs_layout]):
                holder["state"], metrics = compiled(holder["state"], batch)
                return metrics

        start = time.perf_counter()
        jax.block_until_ready(call())  # warm-up: first-run allocations
        row["sgd_warmup_call_s"] = time.perf_counter() - start
        sgd_calls[name] = call

        if f.has_inference:
            for b in INFER_BATCHES:
                x = jax.device_put(batches[f.obs_layout].obs["obs"][:b])
                fwd = jax.jit(mod.apply).lower(params, x).compile(compiler_options=options)
                jax.block_until_ready(fwd(params, x))
                infer_calls[(name, b)] = lambda fwd=fwd, x=x: fwd(params, x)

    for name, seconds in _time_round_robin(sgd_calls, repeats, budget_s).items():
        per_call = parse_variant(name)[1].steps_per_call
        results[name]["sgd_per_step"] = _stats_ms(seconds, per_call)
        results[name]["sgd_per_call"] = _stats_ms(seconds)
    for (name, b), seconds in _time_round_robin(infer_calls, infer_repeats, budget_s).items():
        results[name].setdefault("infer", {})[str(b)] = _stats_ms(seconds)

    return {
        "variants": results,
        "checks": _check_space_to_depth(base),
        "numpy_matmul_calibration_ms": {"before": calibration_before_ms, "after": _calibrate_ms()},
        "jax": jax.__version__,
    }


def _check_space_to_depth(base) -> dict:
    """The first conv as space-to-depth equals the 8x8 stride-4 conv: same kernel, same output."""
    import jax

    x = jax.random.uniform(jax.random.PRNGKey(1), (16, 84, 84, 4))
    conv = base.Conv(32, 8, 4, "conv")
    params = conv.init(jax.random.PRNGKey(2), x)
    y = conv.apply(params, x)
    checks = {"first_conv_output_shape": list(y.shape)}
    for impl in ("space_to_depth", "matmul"):
        y_impl = base.Conv(32, 8, 4, impl).apply(params, x)
        checks[f"first_conv_{impl}_max_abs_diff"] = float(np.max(np.abs(y_impl - y)))
        checks[f"first_conv_{impl}_max_rel_diff"] = float(
            np.max(np.abs(y_impl - y)) / np.max(np.abs(y))
        )
    return checks


# (name, input height = width, in channels, out channels, kernel, stride) of the Nature CNN convs.
NATURE_CONVS = (
    ("conv_0", 84, 4, 32, 8, 4),
    ("conv_1", 20, 32, 64, 4, 2),
    ("conv_2", 9, 64, 64, 3, 1),
)


def run_per_conv(repeats: int) -> dict:
    """Times each conv of the network alone, at minibatch 256: forward, kernel gradient (dW) and
    input gradient (dx; not needed for conv_0, whose input is the data), per formulation and
    YNNPACK setting, interleaved. Shows where an sgd step's time goes."""
    import jax
    import jax.numpy as jnp

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import baseline_ppo_atari as base

    calibration_before_ms = _calibrate_ms()
    calls, rows = {}, {}
    for layer, size, c_in, c_out, kernel, stride in NATURE_CONVS:
        for impl in base.CONV_IMPLS:
            if stride == 1 and impl == "space_to_depth":
                continue  # the same as conv
            conv = base.Conv(c_out, kernel, stride, impl)
            x = jax.random.uniform(jax.random.PRNGKey(0), (MINIBATCH, size, size, c_in))
            params = conv.init(jax.random.PRNGKey(1), x)
            dy = jnp.ones_like(conv.apply(params, x))

            def fwd(p, x, conv=conv):
                return conv.apply(p, x)

            def d_kernel(p, x, dy, fwd=fwd):
                return jax.vjp(lambda p: fwd(p, x), p)[1](dy)[0]

            def d_input(p, x, dy, fwd=fwd):
                return jax.vjp(lambda x: fwd(p, x), x)[1](dy)[0]

            parts = {"fwd": (fwd, (params, x)), "dW": (d_kernel, (params, x, dy))}
            if layer != "conv_0":
                parts["dx"] = (d_input, (params, x, dy))
            for flag_set in ("default", "ynn_conv_off"):
                options = FLAG_SETS[flag_set][0]
                for part, (fn, args) in parts.items():
                    compiled = jax.jit(fn).lower(*args).compile(compiler_options=options)
                    jax.block_until_ready(compiled(*args))
                    key = f"{layer}/{impl}/{part}@{flag_set}"
                    calls[key] = lambda compiled=compiled, args=args: compiled(*args)
                    rows[key] = {"layer": layer, "impl": impl, "part": part, "flag_set": flag_set}
    for key, seconds in _time_round_robin(calls, repeats, budget_s=60.0).items():
        rows[key].update(_stats_ms(seconds))
    return {
        "per_conv": rows,
        "numpy_matmul_calibration_ms": {"before": calibration_before_ms, "after": _calibrate_ms()},
        "jax": jax.__version__,
    }


# ---------------------------------------------------------------------------------------------
# Parent process


def _run_child(name: str) -> dict:
    # XLA_FLAGS cleared: every setting under test is a per-compilation option of its variant.
    env = dict(os.environ, XLA_FLAGS="")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "group.json")
        cmd = [
            sys.executable,
            os.path.abspath(__file__),
            f"--child_group={name}",
            f"--child_out={out}",
            f"--repeats={_REPEATS.value}",
            f"--infer_repeats={_INFER_REPEATS.value}",
            f"--budget_s={_BUDGET_S.value}",
        ]
        start = time.perf_counter()
        subprocess.run(cmd, env=env, check=True)
        with open(out) as f:
            result = json.load(f)
    result["wall_s"] = time.perf_counter() - start
    return result


def format_table(groups: dict) -> str:
    """One row per variant: median ms per sgd step / inference call, speedup vs the group's
    own REFERENCE (measured interleaved with it)."""

    def cell(ms, ref_ms):
        if ms is None:
            return f"{'-':>15}"
        speedup = f"{ref_ms / ms:5.2f}x" if ref_ms else "    ?"
        return f"{ms:8.1f} {speedup}"

    head = f"{'group':<18} {'variant':<34} {'exact':<5} {'sgd ms/step':>15} {'p25':>6}"
    head += "".join(f" {f'infer b={b} ms':>15}" for b in INFER_BATCHES)
    lines = [head, "-" * len(head)]
    for gname, group in groups.items():
        if gname == PER_CONV:
            continue
        ref = group["variants"].get(REFERENCE)
        ref_sgd = ref["sgd_per_step"]["median_ms"] if ref else None
        ref_inf = {b: ref["infer"][str(b)]["median_ms"] for b in INFER_BATCHES} if ref else {}
        for vname, row in group["variants"].items():
            line = f"{gname:<18} {vname:<34} {'yes' if row['exact'] else 'no':<5} "
            line += cell(row["sgd_per_step"]["median_ms"], ref_sgd)
            line += f" {row['sgd_per_step']['p25_ms']:6.1f}"
            for b in INFER_BATCHES:
                inf = row.get("infer", {}).get(str(b))
                line += " " + cell(inf["median_ms"] if inf else None, ref_inf.get(b))
            lines.append(line)
    lines.append(f"speedup = the group's {REFERENCE} ms / this ms (higher is faster)")
    lines.append(
        "p25 = 25th percentile of the sgd ms/step (the quieter moments of a shared machine)"
    )
    lines.append("machine load per group (numpy 512x512 matmul ms before/after; lower = quieter):")
    for gname, group in groups.items():
        cal = group.get("numpy_matmul_calibration_ms", {})
        lines.append(f"  {gname:<18} {cal.get('before', 0):6.2f} / {cal.get('after', 0):6.2f}")
    if PER_CONV in groups:
        lines.append(format_per_conv(groups[PER_CONV]["per_conv"]))
    return "\n".join(lines)


def format_per_conv(rows: dict) -> str:
    """Median ms of each conv's forward / dW / dx, one column per (impl, flag set)."""
    columns = sorted({(r["impl"], r["flag_set"]) for r in rows.values()})
    head = f"{'per conv, batch 256':<20}" + "".join(f" {f'{i}@{f}':>24}" for i, f in columns)
    lines = ["", head, "-" * len(head)]
    for layer, *_ in NATURE_CONVS:
        for part in ("fwd", "dW", "dx"):
            cells = []
            for impl, flag_set in columns:
                row = rows.get(f"{layer}/{impl}/{part}@{flag_set}")
                cells.append(f" {row['median_ms']:24.1f}" if row else f" {'-':>24}")
            if any(c.strip() != "-" for c in cells):
                lines.append(f"{layer + ' ' + part:<20}" + "".join(cells))
    return "\n".join(lines)


def main(argv):
    del argv
    if _CHILD_GROUP.value == PER_CONV:
        result = run_per_conv(_REPEATS.value)
    elif _CHILD_GROUP.value:
        result = run_group(
            GROUPS[_CHILD_GROUP.value],
            _REPEATS.value,
            _INFER_REPEATS.value,
            _BUDGET_S.value,
        )
    if _CHILD_GROUP.value:
        with open(_CHILD_OUT.value, "w") as f:
            json.dump(result, f)
        return

    unknown = [g for g in _GROUPS.value if g not in GROUPS]
    if unknown:
        raise app.UsageError(f"unknown groups {unknown}; known: {sorted(GROUPS)}")
    out = {"groups": {}}
    if _MERGE.value and os.path.exists(_OUT.value):
        with open(_OUT.value) as f:
            out = json.load(f)
    for name in _GROUPS.value:
        print(f"== group {name}", flush=True)
        out["groups"][name] = _run_child(name)
        print(f"   done in {out['groups'][name]['wall_s']:.0f}s", flush=True)
    # Keep the table's order stable: GROUPS order, whatever order the runs came in.
    out["groups"] = {g: out["groups"][g] for g in GROUPS if g in out["groups"]}
    out["flag_sets"] = {
        name: {"compiler_options": options, "exact": exact, "note": note}
        for name, (options, exact, note) in FLAG_SETS.items()
    }
    out["formulations"] = {name: dataclasses.asdict(f) for name, f in FORMULATIONS.items()}
    out["platform"] = {
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "processor": platform.processor(),
    }
    table = format_table(out["groups"])
    out["table"] = table
    print(table)
    os.makedirs(os.path.dirname(os.path.abspath(_OUT.value)), exist_ok=True)
    with open(_OUT.value, "w") as f:
        json.dump(out, f, indent=2)


if __name__ == "__main__":
    app.run(main)
