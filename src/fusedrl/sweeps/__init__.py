"""Many agents in one program: sweeps over seeds and traced hyperparameters.

    swept = fusedrl.sweep(config, num_seeds=4, lr=[1e-4, 3e-4, 1e-3], gamma=[0.98, 0.99])
    swept.metrics["episode_return"].shape      # (4, 3, 2, num_updates): dims seed, lr, gamma
    swept.sel(lr=3e-4, seed=0)                 # one run (dims dropped)
    swept.to_table()                           # one row per run: hyperparameters, seed, summaries
    swept.summary()                            # one row per combination: means over seeds
    swept.plot(by="lr")                        # learning curves by value (matplotlib)

The package is `fusedrl.sweeps`; `fusedrl.sweep` is the function. Its parts:
- `fusedrl.sweeps.space`: what can be swept, the modes (grid, zip, random) and their specs.
- `fusedrl.sweeps.result`: `SweepResult`.
- `fusedrl.sweeps.program`: `sweep` and `check_sweep`, the compiled program and where runs go.
Streams and pieces on a CPU are `fusedrl.streams`; one agent over several devices is
`fusedrl.data_parallel`.
"""

from fusedrl.sweeps.program import RUN_AXIS, check_sweep, sweep
from fusedrl.sweeps.result import SweepResult
from fusedrl.sweeps.space import LOG_UNIFORM_FIELDS, MODES, Choice, LogUniform, Uniform

__all__ = [
    "LOG_UNIFORM_FIELDS",
    "MODES",
    "RUN_AXIS",
    "Choice",
    "LogUniform",
    "SweepResult",
    "Uniform",
    "check_sweep",
    "sweep",
]
