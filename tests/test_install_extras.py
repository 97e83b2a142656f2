"""The `cuda` and `cuda13` extras resolve to a GPU jax for the jax that pip picks on each Python.

`pip install --dry-run --report` resolves fusedrl itself (this checkout, its extras) against the
package index the way a user's `pip install "fusedrl[cuda]"` would, installing nothing. For each
supported Python found here (this interpreter, and python3.12 when there is one) it checks that
the extras do not move jax: the jax of `.[cuda,cuda13]` is the jax of `.`, and jaxlib, both CUDA
plugins and both PJRT plugins are that same version. A CUDA plugin missing for the version that
pip picks would otherwise make pip fall back, silently, to an older jax. Skipped, with the reason,
when the package index cannot be reached; each resolution downloads wheels (about a minute).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.subprocess]

ROOT = Path(__file__).resolve().parents[1]
#: pip's words for a package index it cannot reach (no network, no DNS, a refused proxy).
UNREACHABLE = ("NewConnectionError", "Failed to establish a new connection", "Temporary failure in name",
               "Name or service not known", "Network is unreachable", "ProxyError", "ConnectTimeoutError",
               "Could not fetch URL", "ReadTimeoutError")


def _runs(python: str | None) -> bool:
    return bool(python) and subprocess.run([python, "-c", "pass"], capture_output=True).returncode == 0


def _pythons() -> list[str]:
    """This interpreter, then a python3.12 (pyenv's or on PATH; "" if none runs) unless this is one."""
    found = [sys.executable]
    if sys.version_info[:2] != (3, 12):
        pyenv = os.path.expanduser("~/.pyenv/versions/3.12.1/bin/python3.12")
        candidates = [pyenv, shutil.which("python3.12")]
        found.append(next((c for c in candidates if _runs(c)), ""))
    return found


def _resolve(python: str, requirement: str, tmp_path: Path) -> dict[str, str]:
    """{name: version} of what `pip install --dry-run` would install for `requirement`."""
    report = tmp_path / "report.json"
    proc = subprocess.run(
        [python, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
         "--report", str(report), requirement],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
    )
    if proc.returncode:
        if any(word in proc.stderr for word in UNREACHABLE):
            pytest.skip(f"package index unreachable, extras not checked: {proc.stderr.strip()[-300:]}")
        raise AssertionError(f"pip could not resolve {requirement} with {python}:\n{proc.stderr[-3000:]}")
    installs = json.loads(report.read_text())["install"]
    return {i["metadata"]["name"].lower().replace("_", "-"): i["metadata"]["version"] for i in installs}


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("which", [0, 1], ids=["this-python", "python3.12"])
def test_cuda_extras_install_the_gpu_build_of_the_jax_pip_picks(which, tmp_path):
    pythons = _pythons()
    if which >= len(pythons):
        pytest.skip("this interpreter is Python 3.12: the other case covers it")
    python = pythons[which]
    if not python:
        pytest.skip("no python3.12 here (on PATH or pyenv's 3.12.1): jax 0.11's extras not checked")
    version = subprocess.run([python, "-c", "import sys; print(*sys.version_info[:2], sep='.')"],
                             capture_output=True, text=True, check=True).stdout.strip()
    base = _resolve(python, ".", tmp_path)
    gpu = _resolve(python, ".[cuda,cuda13]", tmp_path)
    jax = base["jax"]
    assert gpu["jax"] == jax, f"Python {version}: the extras moved jax from {jax} to {gpu['jax']}"
    for name in ("jaxlib", "jax-cuda12-plugin", "jax-cuda12-pjrt", "jax-cuda13-plugin", "jax-cuda13-pjrt"):
        assert gpu.get(name) == jax, f"Python {version}: {name} {gpu.get(name)} with jax {jax}"
    # The jax that pip picks: 0.10 on Python 3.11 (jax 0.11 needs 3.12), 0.11 on 3.12+.
    minor = int(jax.split(".")[1])
    assert minor >= (10 if version == "3.11" else 11), f"Python {version} resolved jax {jax}"
