"""Shared by the trace viewer's tests: the viewer's command line, and a session-free fixture."""
import importlib.util
import os
import subprocess
import sys

import pytest


def _trace_cli():
    """The viewer's command line, with actorflow.trace importable: `python -m actorflow.trace` where
    the compiled actorflow._C is built, else standalone.py (a source checkout before the build)."""
    try:
        import actorflow.trace  # noqa: F401
        if getattr(sys.modules["actorflow"], "__file__", None):  # the real package, not a bare one
            return [sys.executable, "-m", "actorflow.trace"]
    except ImportError:
        pass
    for entry in sys.path:
        path = os.path.join(entry or ".", "actorflow", "trace", "standalone.py")
        if os.path.exists(path):
            spec = importlib.util.spec_from_file_location("actorflow_trace_standalone", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            module.install()
            return [sys.executable, path]
    raise ImportError("actorflow/trace/standalone.py is on no sys.path entry")


CLI = _trace_cli()


def run_cli(*args, timeout=120):
    return subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def no_session():
    """The viewer needs no session (conftest's autouse fixture needs the compiled runtime)."""
    yield
