"""Where the wall time of one PPO update goes (fused or host bridge): see fusedrl.profile.

    python -m fusedrl.bench profile --env CartPole-v1 --mode fused|bridge [--repeats 5]
"""

from __future__ import annotations

from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    from fusedrl.profile import main as profile_main

    return profile_main(argv, prog="python -m fusedrl.bench profile")
