"""fusedrl.envs: pure-JAX environments on the gymnax 1.0 contract, a registry, and wrappers."""

from fusedrl.envs.base import (
    Box,
    Discrete,
    Environment,
    EnvParams,
    EnvState,
    check_action,
    check_params,
    space_info,
)
from fusedrl.envs.cartpole import CartPole, CartPoleParams
from fusedrl.envs.registry import make, register, registered_ids
from fusedrl.envs.vector import VecEnv, VecEnvState

register("CartPole-v1", CartPole)

__all__ = [
    "Box",
    "CartPole",
    "CartPoleParams",
    "Discrete",
    "EnvParams",
    "EnvState",
    "Environment",
    "VecEnv",
    "VecEnvState",
    "check_action",
    "check_params",
    "make",
    "register",
    "registered_ids",
    "space_info",
]
