"""fusedrl: on-policy reinforcement learning fused into one device-resident JAX program."""

from fusedrl.envs import make, register, registered_ids

__version__ = "0.1.0"

__all__ = ["__version__", "make", "register", "registered_ids"]
