"""gymnax's base-class modules (`environment`, `spaces`) without its environment families.

`import gymnax.environments.environment` runs `gymnax/environments/__init__.py` first, which imports
every env family (the `misc` family imports seaborn and scipy.stats): seconds of start-up for two
small modules. This loads the two modules from gymnax's files under their own names and puts them in
`sys.modules`, so a later `import gymnax` finds and reuses them: its classes are the ones loaded here
(`isinstance` and `is` checks agree either way).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def _load(name: str) -> ModuleType:
    full = f"gymnax.environments.{name}"
    if full in sys.modules:  # gymnax already imported (or loaded here before)
        return sys.modules[full]
    package = importlib.util.find_spec("gymnax")  # locates gymnax without running its __init__
    if package is None or not package.submodule_search_locations:
        raise ImportError("fusedrl needs gymnax: pip install gymnax")
    path = Path(next(iter(package.submodule_search_locations))) / "environments" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(full, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"gymnax's {full} not found at {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[full] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[full]
        raise
    return module


environment = _load("environment")
spaces = _load("spaces")
