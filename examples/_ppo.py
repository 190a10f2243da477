"""CleanRL's PPO update as one function, shared by the recipes' CleanRL-style loops (MiniGrid, NetHack).

It is the update of :mod:`magister.examples.cleanrl_ppo` (GAE with CleanRL's ``dones`` convention, clipped
policy loss, value loss, entropy bonus, gradient clipping) with magister's two additions: PLR's value scores
fed after GAE and evaluation-only steps masked out of the gradients, both through
:class:`~magister.integrations.RolloutTasks`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn as nn

from magister.integrations import RolloutTasks

__all__ = ["ppo_update"]


def ppo_update(args: Any, agent: nn.Module, optimizer: torch.optim.Optimizer, rng: np.random.Generator,
               tasks: RolloutTasks, obs: torch.Tensor, actions: torch.Tensor, logprobs: torch.Tensor,
               rewards: torch.Tensor, dones: torch.Tensor, values: torch.Tensor, next_obs: torch.Tensor,
               next_done: torch.Tensor, fed: Any = None) -> dict[str, float]:
    """GAE, PLR's scores to ``fed`` (a PLR-family curriculum or its server; ``None``: no scores), then
    CleanRL's clipped PPO update (evaluation-only steps masked out).

    ``agent`` is anything with ``get_value(obs)`` and ``get_action_and_value(obs, action)`` on flat
    observation rows; ``args`` has CleanRL's PPO fields."""
    with torch.no_grad():  # dones[t] is the done flag seen *before* step t
        next_value = agent.get_value(next_obs).reshape(1, -1)
        advantages = torch.zeros_like(rewards)
        lastgaelam = torch.zeros(args.num_envs)
        for t in reversed(range(args.num_steps)):
            if t == args.num_steps - 1:
                nextnonterminal, nextvalues = 1.0 - next_done, next_value
            else:
                nextnonterminal, nextvalues = 1.0 - dones[t + 1], values[t + 1]
            delta = rewards[t] + args.gamma * nextvalues * nextnonterminal - values[t]
            lastgaelam = delta + args.gamma * args.gae_lambda * nextnonterminal * lastgaelam
            advantages[t] = lastgaelam
        returns = advantages + values
    if fed is not None:
        tasks.feed_scores(fed, rewards, values, dones, next_value, next_done)  # magister: PLR's scores
    b_obs = obs.reshape(-1, obs.shape[-1])
    b_logprobs, b_actions = logprobs.reshape(-1), actions.reshape(-1)
    b_advantages, b_returns = advantages.reshape(-1), returns.reshape(-1)
    b_inds = tasks.train_indices()  # magister: evaluation-only steps stay out of the gradients
    minibatch_size = max(1, len(b_inds) // args.num_minibatches)
    stats: dict[str, float] = {}
    for _epoch in range(args.update_epochs):
        rng.shuffle(b_inds)
        for s in range(0, len(b_inds), minibatch_size):
            mb = b_inds[s:s + minibatch_size]
            _, newlogprob, entropy, newvalue = agent.get_action_and_value(b_obs[mb], b_actions[mb])
            ratio = (newlogprob - b_logprobs[mb]).exp()
            adv = b_advantages[mb]
            if len(mb) > 1:
                adv = (adv - adv.mean()) / (adv.std() + 1e-8)
            clipped = ratio.clamp(1 - args.clip_coef, 1 + args.clip_coef)
            pg_loss = torch.max(-adv * ratio, -adv * clipped).mean()
            v_loss = 0.5 * ((newvalue.view(-1) - b_returns[mb]) ** 2).mean()
            loss = pg_loss - args.ent_coef * entropy.mean() + args.vf_coef * v_loss
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
            optimizer.step()
            stats = {"losses/policy": pg_loss.item(), "losses/value": v_loss.item(),
                     "losses/entropy": entropy.mean().item()}
    return stats
