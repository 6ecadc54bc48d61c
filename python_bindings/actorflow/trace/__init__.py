"""actorflow's trace viewer: read, check, summarize and draw the runtime's Chrome trace files.

    python -m actorflow.trace view trace.json -o trace.html
    python -m actorflow.trace summary trace.json [--json]
    python -m actorflow.trace graph plan.json|trace.json -o graph.svg
    python -m actorflow.trace validate trace.json

Pure Python (numpy; graphviz's `dot` for graph): it needs neither the compiled runtime nor a
network, so traces can be studied on any machine.
"""

from .reader import Trace, TraceError, load, read_json
from .summary import format_text, summarize
from .validate import validate

__all__ = ["Trace", "TraceError", "load", "read_json", "summarize", "format_text", "validate"]
