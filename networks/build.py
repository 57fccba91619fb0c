"""From a config's `network` section and an env's spaces to a Network: every check of the
section against the spaces (`network_problems`, which seedlike.config.validate also runs), and the
specs the ActorCritic is built from (`make_network`).

Settings whose zero value means "the part's own" stay so here and are left to the part: the CNN
torsos' channels, dense width, kernel and padding (the papers' values, networks/torsos.py).
"""

from __future__ import annotations

import numpy as np

from networks import heads, torsos
from networks.actor_critic import (
    BOARD_LINES,
    ActorCritic,
    CoreSpec,
    EncoderSpec,
    HeadSpec,
    Network,
    TorsoSpec,
)
from seedlike.types import LEGAL_ACTION_MASK, EnvSpec
from seedlike.types import TEAMMATES_PRESENT as PRESENT

TORSOS = ("mlp", *torsos.CNN_TORSOS)
CORES = ("none", "lstm")
PADDINGS = ("", "SAME", "VALID")


class NetworkError(ValueError):
    """A network setting that does not fit the env's spaces (or another setting): one line each,
    naming the key and what to set instead."""


def network_problems(network_config, spec: EnvSpec) -> list[str]:
    """What is wrong with `network_config` for `spec`, one line per problem naming the key ([]:
    nothing). Checks that need an earlier one to pass are left out after it fails."""
    c, problems = network_config, []
    shapes = {k: str(v) for k, v in spec.observation.items()}
    fix = {"mirror": "set network.mirror='' for this env"}
    if c.torso not in TORSOS:
        return [f"network.torso={c.torso!r} is not one of {list(TORSOS)}"]
    if c.core not in CORES:
        return [f"network.core={c.core!r} is not one of {list(CORES)}"]
    if _policy_head(c) not in heads.POLICY_HEADS:
        problems.append(
            f"network.policy_head={c.policy_head!r} is not one of {list(heads.POLICY_HEADS)}"
        )
    elif heads.action_values(_policy_head(c)):
        problems += _q_problems(c, spec)
    if c.torso != "mlp":
        image = spec.observation.get(c.image_key)
        if image is None or len(image.shape) != 3:
            return problems + [
                f"network.torso={c.torso!r} needs a [H, W, C] or [C, H, W] image observation "
                f"network.image_key={c.image_key!r}; {spec.name} has {shapes}"
            ]
    if (c.cnn_kernel or c.cnn_padding) and c.torso != "board_cnn":
        problems.append(
            f"network.cnn_kernel / network.cnn_padding apply to the board_cnn torso only, not "
            f"network.torso={c.torso!r}; leave them at 0 / ''"
        )
    if c.layer_norm and c.torso not in ("mlp", "board_cnn"):
        problems.append(
            f"network.layer_norm is for the mlp and board_cnn torsos, not network.torso="
            f"{c.torso!r}; set it to False"
        )
    if c.cnn_padding not in PADDINGS:
        problems.append(f"network.cnn_padding={c.cnn_padding!r} is not one of {list(PADDINGS)}")
    if c.mirror:
        problems += _mirror_problems(c, spec, _layout(c, spec), fix["mirror"])
    if c.text_key:
        words = spec.observation.get(c.text_key)
        if words is None or len(words.shape) != 1 or not np.issubdtype(words.dtype, np.integer):
            problems.append(
                f"network.text_key={c.text_key!r} needs an int [L] observation of word ids "
                f"(env.mission_tokens); {spec.name} has {shapes}"
            )
    if c.team_pool and not (0.0 < c.team_pool <= 1.0 and PRESENT in spec.observation):
        problems.append(
            f"network.team_pool={c.team_pool} pools a share in (0, 1] of the torso's features "
            "across teammates: it needs env.teammates (the teammates' observations in every row) "
            "and no network.mirror; set network.team_pool=0 otherwise"
        )
    elif c.team_pool and c.mirror:
        problems.append("network.team_pool and network.mirror do not combine; set one to 0 / ''")
    problems += _entity_problems(c, spec, shapes)
    if spec.continuous and (c.autoregressive or c.mirror or c.team_pool):
        problems.append(
            f"{spec.name} has {spec.continuous} continuous action dimensions: network."
            "autoregressive, network.mirror and network.team_pool are for discrete actions; "
            "turn them off"
        )
    if c.autoregressive and (len(spec.action_heads) < 2 or c.mirror):
        problems.append(
            f"network.autoregressive conditions later action heads on earlier ones: it needs a "
            f"factorized action (a MultiDiscrete action space; {spec.name} has "
            f"{len(spec.head_sizes)} head) and no network.mirror; set it to False"
        )
    problems += _board_lines_problems(c, spec, shapes)
    return problems


def _q_problems(c, spec: EnvSpec) -> list[str]:
    """What keeps a Q head (network.policy_head="q") from this config and env."""
    problems = []
    if LEGAL_ACTION_MASK in spec.extras:
        problems.append(
            f"network.policy_head='q': {spec.name} masks illegal actions, which the Q head's "
            "targets do not handle; use ppo or vtrace"
        )
    if spec.continuous or len(spec.head_sizes) != 1:
        problems.append(
            f"network.policy_head='q' values each of one set of discrete actions; {spec.name} has "
            f"{'continuous' if spec.continuous else len(spec.head_sizes)} action heads"
        )
    if c.mirror or c.team_pool or c.autoregressive or c.pointer_heads:
        problems.append(
            "network.policy_head='q' does not combine with network.mirror, team_pool, "
            "autoregressive or pointer_heads; turn them off"
        )
    if int(c.atoms) < 1:
        problems.append(f"network.atoms={c.atoms} must be >= 1 (1: expected values, no C51)")
    low, high = (float(v) for v in c.value_range)
    if int(c.atoms) > 1 and not low < high:
        problems.append(
            f"network.value_range={tuple(c.value_range)} must be (low, high), low < high"
        )
    return problems


def _layout(c, spec: EnvSpec) -> str:
    """How the image observation is laid out: CHW or HWC (auto: channels = the smaller end)."""
    if c.torso == "mlp" or c.image_layout != "auto":
        return "HWC" if c.torso == "mlp" else c.image_layout
    shape = spec.observation[c.image_key].shape
    return "CHW" if shape[0] < shape[-1] else "HWC"


def _mirror_problems(c, spec: EnvSpec, layout: str, fix: str) -> list[str]:
    shapes = {k: tuple(s.shape) for k, s in spec.observation.items()}
    if c.core != "none":
        return [f"network.mirror={c.mirror!r} needs a feed-forward network (core none); {fix}"]
    # The flip is of axis W of [N, H, W, C]; an image declared CHW would be flipped along H.
    if layout == "CHW" or any(len(s) != 3 or s[0] < s[-1] for s in shapes.values()):
        return [
            f"network.mirror={c.mirror!r} flips [H, W, C] board observations; {spec.name} has "
            f"{shapes}; {fix}"
        ]
    height, width = next(iter(shapes.values()))[:2]
    actions = {"columns": width, "cells": height * width}.get(c.mirror)
    if actions is None:
        return [f"network.mirror={c.mirror!r} is not one of '', 'columns', 'cells'"]
    if spec.num_actions != actions or any(s[1] != width for s in shapes.values()):
        return [
            f"network.mirror={c.mirror!r} needs {actions} actions and boards {width} wide; "
            f"{spec.name} has {spec.num_actions} actions and observations {shapes}; {fix}"
        ]
    return []


def _entity_problems(c, spec: EnvSpec, shapes: dict) -> list[str]:
    """network.entities and network.pointer_heads against the env's spaces."""
    problems = []
    if c.entities:
        units = spec.observation.get(c.entities)
        if units is None or len(units.shape) != 2 or not np.issubdtype(units.dtype, np.floating):
            return [
                f"network.entities={c.entities!r} needs a float [E, F] observation (E entities "
                f"of F attributes, absent ones all zero); {spec.name} has {shapes}"
            ]
        if c.mirror or c.team_pool:
            problems.append(
                "network.entities does not combine with network.mirror or network.team_pool; "
                "set those to '' / 0"
            )
    pointers = tuple(int(i) for i in c.pointer_heads)
    if pointers:
        sizes = spec.head_sizes
        entities = spec.observation[c.entities].shape[0] if c.entities else 0
        bad = [i for i in pointers if not 0 <= i < len(sizes) or sizes[i] < entities]
        if not c.entities or bad or len(set(pointers)) != len(pointers):
            problems.append(
                f"network.pointer_heads={list(pointers)} name action heads (indices into "
                f"{list(sizes)}) of at least E choices that point into the entity set "
                f"network.entities (E={entities}, {c.entities or 'not set'}); fix the indices or "
                "set network.entities"
            )
    return problems


def _board_lines_problems(c, spec: EnvSpec, shapes: dict) -> list[str]:
    if not c.board_lines:
        return []
    board = spec.observation.get(c.board_key)
    fix = "set network.board_lines=0 for this env"
    if board is None or len(board.shape) != 3 or board.shape[-1] != 2:
        return [
            f"network.board_lines={c.board_lines} reads a board [H, W, 2] (planes mine, theirs) "
            f"in observation network.board_key={c.board_key!r}; {spec.name} has {shapes}: {fix}"
        ]
    h, w, _ = board.shape
    fits = 2 <= c.board_lines <= max(h, w) and c.torso == "mlp" and not c.team_pool
    if not fits or c.board_key + BOARD_LINES in spec.observation:
        return [
            f"network.board_lines={c.board_lines} needs 2 <= lines <= {max(h, w)} (the board is "
            f"{h} x {w}), network.torso='mlp' (not {c.torso!r}), no network.team_pool and no "
            f"observation named {c.board_key + BOARD_LINES!r}; {fix}"
        ]
    return []


def _own(torso: str, field: str, none):
    """A CNN torso's own default for `field` (`none` where it has no such field)."""
    cls = torsos.CNN_TORSOS.get(torso)
    return getattr(cls, field, none) if cls is not None else none


def _policy_head(c) -> str:
    """The section's policy head: "auto" is the algorithm's, which seedlike.config.resolve writes
    in from the algorithm's record before a run builds its network; from the section alone it
    is a policy's, "categorical" (the learners check that the head is the algorithm's)."""
    return "categorical" if c.policy_head == "auto" else c.policy_head


def make_network(network_config, spec: EnvSpec) -> Network:
    """Builds the network described by a config's `network` section (NetworkError, naming the
    setting, where it does not fit the env)."""
    problems = network_problems(network_config, spec)
    if problems:
        raise NetworkError("; ".join(problems))
    c = network_config
    lstm = c.core == "lstm"
    layout = _layout(c, spec)
    torso = TorsoSpec(
        kind=c.torso,
        hidden_sizes=tuple(int(h) for h in c.hidden_sizes),
        activation=c.activation,
        residual_blocks=int(c.residual_blocks),
        layer_norm=bool(c.layer_norm),
        # A Q head reads one torso (it has no value head for a second).
        shared=bool(c.shared_torso)
        or c.torso != "mlp"
        or lstm
        or heads.action_values(_policy_head(c)),
        cnn_channels=tuple(int(n) for n in c.cnn_channels) or None,
        cnn_hidden=int(c.cnn_hidden) or None,
        # The board CNN's own kernel and padding when 0 / "", so that both spellings build the
        # same torso (and surgery sees no change between them).
        cnn_kernel=int(c.cnn_kernel) or _own(c.torso, "kernel_size", 0),
        cnn_padding=c.cnn_padding or _own(c.torso, "padding", ""),
        image_key=c.image_key if c.torso != "mlp" else None,
        space_to_depth=bool(c.space_to_depth),
        mirror=c.mirror,
        board_width=spec.observation[next(iter(spec.observation))].shape[1] if c.mirror else 0,
        team_pool=float(c.team_pool),
    )
    encoders = EncoderSpec(
        text_key=c.text_key,
        text_size=int(c.text_size),
        entity_key=c.entities,
        num_entities=spec.observation[c.entities].shape[0] if c.entities else 0,
        entity_size=int(c.entity_size),
        entity_heads=int(c.entity_heads),
    )
    head_spec = HeadSpec(
        num_actions=spec.num_actions,
        action_heads=tuple(spec.action_heads),
        policy=_policy_head(c),
        pointer_heads=tuple(int(i) for i in c.pointer_heads),
        autoregressive=bool(c.autoregressive),
        continuous=spec.continuous,
        state_dependent_std=bool(c.state_dependent_std),
        log_std_init=float(c.log_std_init),
        atoms=int(c.atoms),
        dueling=bool(c.dueling),
        value_range=tuple(float(v) for v in c.value_range),
        noisy=bool(c.noisy),
    )
    core = CoreSpec(size=int(c.core_size) if lstm else 0)
    lines = int(c.board_lines)
    return Network(
        spec=spec,
        module=ActorCritic(torso, encoders, core, head_spec),
        normalize_obs=bool(c.normalize_obs),
        obs_clip=float(c.obs_clip),
        image_layout=layout,
        image_scale=float(c.image_scale),
        action_squash=bool(c.action_squash) and spec.continuous > 0,
        board_lines=lines,
        board_gravity=bool(c.board_gravity) and lines > 0,
        board_key=c.board_key if lines else "",
    )
