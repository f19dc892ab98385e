"""Load the symbol-link experiment's harness (experiments/symbol_link/symbol_link_counterexample.py)
as a module, by its path: its watchdog, verdicts and problems have unit tests but no command
line of their own. Nothing else may use this: benchmarks and experiments are tested through
their command lines, and code a test shares with them lives beside the kernel it serves.
The module is registered under its file name (dataclasses look their module up).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def load_script(relpath: str) -> ModuleType:
    """The module of ROOT/relpath (e.g. "benchmarks/bazel_scale.py"), loaded once per process."""
    path = ROOT / relpath
    name = path.stem
    loaded = sys.modules.get(name)
    if loaded is not None and Path(getattr(loaded, "__file__", "") or "").resolve() == path.resolve():
        return loaded
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module
