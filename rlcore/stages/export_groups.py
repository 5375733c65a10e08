"""The export stage of a run with ``policy.groups``: one model per group, in ``export/<name>/<group>/``
(``policy.onnx``, ``policy.pt2``, ``model_card.json``), and ``export/<name>/model_card.json`` listing the groups and
their agents; with ``env.agent_id`` also one model of the env's rows (``export/<name>/policy.onnx``, ``policy.pt2``:
each row's group read from its one-hot), the file the pipeline's export stage promises.

Each group's model is its member of the grouped policy (``rlcore.nets.grouped``): it reads one agent's observation
at its true width followed, with ``env.agent_id``, by the one-hot of the agent's index within the group (its card
says which agent each index is). Parity is checked on the group's columns of real rows of the grouped policy
acting in the env.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlcore.common.checkpoints import Checkpoint
from rlcore.common.files import check_target, remove_stale
from rlcore.common.stage_paths import export_files
from rlcore.envs.config import EnvConfig
from rlcore.envs.vector import describe_space
from rlcore.evaluation.export import ExportOptions, export_policy, model_card, parity_observations, write_model_card
from rlcore.nets.grouped import GroupedActorCritic


def export_groups(
    policy: GroupedActorCritic,
    checkpoint: Checkpoint,
    selection: dict[str, Any],
    options: ExportOptions,
    out_dir: Path,
    command: str,
    root: Path,
) -> Path:
    """Export every group's model of ``policy`` (selected ``checkpoint``) into ``out_dir/<group>/``; returns the
    path of ``out_dir/model_card.json``, the groups' index."""
    meta = checkpoint.meta
    env = EnvConfig.model_validate(meta["params"]["env"])
    layout = policy.layout
    agents = len(layout.agent_names)
    count = options.parity_observations
    # Rows of whole env copies (every agent of each), enough for each group to have ``count`` of its own.
    rows = parity_observations(env, policy, count * agents, seed=0)
    owner = np.tile(layout.group_of_agent(), -(-len(rows) // agents))[: len(rows)]
    for output in (path for group in layout.groups for path in export_files(out_dir / group.name)):
        check_target(output)  # a folder or a pipe in the way is refused before any group is exported
    groups: dict[str, Any] = {}
    for index, group in enumerate(layout.groups):
        member = policy.members[group.name]
        picked = torch.as_tensor(rows[owner == index][:count])
        inputs = {"obs": policy.member_obs(picked, index).numpy()}
        member_meta = copy.deepcopy(meta)
        member_meta["spaces"]["observation"] = describe_space(group.observation_space)
        result = export_policy(member, member_meta, out_dir / group.name, options, inputs=inputs)  # type: ignore[arg-type]
        names = [layout.agent_names[a] for a in group.agents]
        card = model_card(member_meta, selection, result, command, root)
        card["env"]["agents"] = {"names": list(layout.agent_names), "shared_policy": False, "groups": layout.members()}
        card["group"] = {
            "name": group.name,
            "agents": names,
            "observation": (
                f"the agent's own observation ({len(group.columns) - (len(names) if env.agent_id is not False else 0)} "
                "values)"
                + (
                    f" followed by the one-hot ({len(names)} values) of its index in agents"
                    if env.agent_id is not False
                    else ""
                )
            ),
        }
        write_model_card(out_dir / group.name, card)
        groups[group.name] = {"agents": names, "files": sorted(result.files), "card": f"{group.name}/model_card.json"}
    agents_card = {"names": list(layout.agent_names), "shared_policy": False, "groups": layout.members()}
    if layout.one_hot_start is None:  # without env.agent_id a row's group is its position: no model of all rows
        for stale in ("policy.onnx", "policy.pt2"):  # a shared policy exported here before: not this run's
            remove_stale(out_dir / stale)
        index_card = {"name": meta["params"]["name"], "algorithm": meta["params"]["algo"]["name"], "groups": groups}
        return write_model_card(out_dir, index_card)
    # With env.agent_id: also one model of every row (each row's group read from its one-hot), what the pipeline's
    # export/<name>/policy.onnx is: the env's padded rows in, each row's group's greedy action out.
    result = export_policy(policy, meta, out_dir, options)
    card = model_card(meta, selection, result, command, root)
    card["env"]["agents"] = {
        **agents_card,
        "observation": "the env's row: the agent's observation zero-padded to the widest agent's, then its one-hot "
        "over all agents (names), which picks its group's policy",
    }
    card["groups"] = groups
    return write_model_card(out_dir, card)
