"""The trace viewer without the compiled runtime.

`import actorflow.trace` first runs actorflow/__init__.py, which loads the compiled actorflow._C;
on a machine that only studies traces (or a source checkout before the build) that fails. This
file loads the pure-Python trace package on its own:

    python3 path/to/actorflow/trace/standalone.py summary trace.json

or, from Python, `install()` then `import actorflow.trace`.
"""

import importlib
import os
import sys
import types


def install():
    """Makes `import actorflow.trace` work by registering `actorflow` as a bare package (its
    __init__.py not run) when the real one cannot be imported. Returns actorflow.trace."""
    try:
        return importlib.import_module("actorflow.trace")
    except ImportError:
        pass
    for name in [m for m in sys.modules if m == "actorflow" or m.startswith("actorflow.")]:
        del sys.modules[name]
    package = types.ModuleType("actorflow", "actorflow (bare: only the pure-Python subpackages)")
    package.__path__ = [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]
    sys.modules["actorflow"] = package
    return importlib.import_module("actorflow.trace")


if __name__ == "__main__":
    # Run as a script, this file's folder is sys.path[0]; the package's parent belongs there.
    here = os.path.dirname(os.path.abspath(__file__))
    if sys.path and os.path.abspath(sys.path[0] or ".") == here:
        sys.path[0] = os.path.dirname(os.path.dirname(here))
    install()
    from actorflow.trace.cli import main

    sys.exit(main())
