"""Command line of `python -m actorflow.trace`. Every failure the user can cause (a missing,
malformed or truncated file, an unwritable output) is one line on stderr and exit status 2."""

import argparse
import os
import sys
import time

from . import graph, summary, timeline
from .reader import TraceError, events_of, load, read_json
from .validate import validate

EXIT_ERROR = 2


def _view(args):
    started = time.perf_counter()
    trace = load(args.trace)
    out = args.output or os.path.splitext(args.trace)[0] + ".html"
    size = timeline.write(trace, out, args.max_events)
    print(f"wrote {out} ({size / 1e6:.1f} MB, {len(trace.lanes)} lanes, {trace.num_events} events) "
          f"in {time.perf_counter() - started:.1f}s")


def _summary(args):
    result = summary.summarize(load(args.trace))
    print(summary.format_json(result) if args.json else summary.format_text(result))


def _graph(args):
    actors, stats, bottleneck, title = graph.load_graph(args.input, args.trace)
    graph.write(graph.to_dot(actors, stats, bottleneck, title), args.output)
    print(f"wrote {args.output} ({len(actors)} actors)")


def _validate(args):
    doc = read_json(args.trace)
    problems = validate(doc, args.max_problems)
    if problems:
        for p in problems:
            print(f"{args.trace}: {p}", file=sys.stderr)
        return EXIT_ERROR
    print(f"{args.trace}: valid Chrome trace event JSON ({len(events_of(args.trace, doc))} events)")
    return 0


def parser():
    p = argparse.ArgumentParser(prog="python -m actorflow.trace",
                                description="Study an actorflow runtime trace (Chrome trace event JSON).")
    sub = p.add_subparsers(dest="command", required=True)
    v = sub.add_parser("view", help="write a self-contained HTML timeline (one lane per actor)")
    v.add_argument("trace")
    v.add_argument("-o", "--output", help="HTML file to write (default: the trace's name with .html)")
    v.add_argument("--max-events", type=int, default=4_000_000,
                   help="embed individual events up to this many; above it, only aggregated occupancy")
    v.set_defaults(run=_view)
    s = sub.add_parser("summary", help="per-actor busy/wait shares, iterations/s, the bottleneck and advice")
    s.add_argument("trace")
    s.add_argument("--json", action="store_true", help="print JSON instead of text")
    s.set_defaults(run=_summary)
    g = sub.add_parser("graph", help="draw the actor graph with graphviz (edges: register_num; nodes: busy %%)")
    g.add_argument("input", help="a trace, or a plan (protobuf JSON or text format of plan.proto)")
    g.add_argument("-o", "--output", required=True, help=".svg/.png/.pdf (through `dot`) or .dot")
    g.add_argument("--trace", help="colour a plan's nodes by this trace's measurements")
    g.set_defaults(run=_graph)
    c = sub.add_parser("validate", help="check the file against the Chrome trace event format")
    c.add_argument("trace")
    c.add_argument("--max-problems", type=int, default=20)
    c.set_defaults(run=_validate)
    return p


def main(argv=None):
    args = parser().parse_args(argv)
    try:
        return args.run(args) or 0
    except TraceError as e:
        print(f"actorflow.trace: error: {e}", file=sys.stderr)
    except OSError as e:  # mostly: the output cannot be written
        where = e.filename or getattr(args, "output", "") or ""
        print(f"actorflow.trace: error: {where}: {e.strerror or e}", file=sys.stderr)
    except KeyboardInterrupt:
        return 130
    return EXIT_ERROR
