"""fusedrl.envs: pure-JAX environments on the gymnax 1.0 contract, a registry, and wrappers."""

from fusedrl.envs.acrobot import Acrobot, AcrobotParams
from fusedrl.envs.base import (
    Box,
    Dict,
    Discrete,
    Environment,
    EnvParams,
    EnvState,
    MultiDiscrete,
    check_action,
    check_params,
    space_info,
)
from fusedrl.envs.cartpole import CartPole, CartPoleNoVelocity, CartPoleParams
from fusedrl.envs.mountain_car import MountainCar, MountainCarParams
from fusedrl.envs.mountain_car_continuous import MountainCarContinuous, MountainCarContinuousParams
from fusedrl.envs.pendulum import Pendulum, PendulumParams
from fusedrl.envs.probes import PROBE_IDS, PROBES
from fusedrl.envs.registry import check_env_id, make, register, registered_ids
from fusedrl.envs.vector import StepDraws, VecEnv, VecEnvState

register("CartPole-v1", CartPole)
register("CartPole-NoVelocity-v1", CartPoleNoVelocity)  # partially observed: (x, theta) only
register("Acrobot-v1", Acrobot)
register("MountainCar-v0", MountainCar)
register("MountainCarContinuous-v0", MountainCarContinuous)
register("Pendulum-v1", Pendulum)
for _probe_id, _probe in PROBES.items():  # tiny tasks with known answers, for fast learning checks
    register(_probe_id, _probe)

__all__ = [
    "Acrobot",
    "AcrobotParams",
    "Box",
    "CartPole",
    "CartPoleNoVelocity",
    "CartPoleParams",
    "Dict",
    "Discrete",
    "EnvParams",
    "EnvState",
    "Environment",
    "MountainCar",
    "MountainCarContinuous",
    "MountainCarContinuousParams",
    "MountainCarParams",
    "MultiDiscrete",
    "Pendulum",
    "PendulumParams",
    "PROBE_IDS",
    "VecEnv",
    "StepDraws",
    "VecEnvState",
    "check_action",
    "check_env_id",
    "check_params",
    "make",
    "register",
    "registered_ids",
    "space_info",
]
