"""Load a script of the repository (a benchmark's or an experiment's) as a module, by its path.

Some tests check code that lives in a script (benchmarks/, experiments/). They load it from its
file instead of putting its folder on sys.path, so no test's imports depend on another folder's
module names. The module is registered under its file name (dataclasses look their module up).
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
