"""Name suggestions for a mistyped PPOConfig field: other libraries' names first, then close spellings.

A user coming from cleanrl, Stable-Baselines3 or PureJaxRL types `learning_rate`, `n_epochs` or
`CLIP_EPS`; difflib alone finds nothing close to `lr` in `learning_rate`.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence

#: Other libraries' names (lower case) for PPOConfig fields.
FIELD_ALIASES = {
    "learning_rate": "lr",
    "lr_anneal": "anneal_lr",
    "anneal_learning_rate": "anneal_lr",
    "n_envs": "num_envs",
    "n_steps": "num_steps",
    "num_epochs": "update_epochs",
    "n_epochs": "update_epochs",
    "epochs": "update_epochs",
    "ppo_epochs": "update_epochs",
    "n_minibatches": "num_minibatches",
    "minibatches": "num_minibatches",
    "nminibatches": "num_minibatches",
    "clip_range": "clip_eps",
    "clip_coef": "clip_eps",
    "clip_epsilon": "clip_eps",
    "clip_param": "clip_eps",
    "entropy_coef": "ent_coef",
    "value_coef": "vf_coef",
    "vf_loss_coef": "vf_coef",
    "value_loss_coef": "vf_coef",
    "total_steps": "total_timesteps",
    "timesteps": "total_timesteps",
    "num_timesteps": "total_timesteps",
    "gae_lam": "gae_lambda",
    "lam": "gae_lambda",
    "discount": "gamma",
    "clip_vloss": "clip_value_loss",
    "norm_adv": "normalize_adv",
    "net_arch": "hidden_sizes",
}


def close_names(name: str, valid: Sequence[str], n: int = 3) -> list[str]:
    """Up to `n` names of `valid` that `name` may have meant: an alias (`FIELD_ALIASES`), the same
    name in another case, then the closest spellings (case aside)."""
    key = name.lower()
    by_lower = {v.lower(): v for v in valid}
    out = []
    alias = FIELD_ALIASES.get(key)
    if alias in valid:
        out.append(alias)
    if key in by_lower:
        out.append(by_lower[key])
    out += [by_lower[m] for m in difflib.get_close_matches(key, by_lower, n=n)]
    return list(dict.fromkeys(out))[:n]
