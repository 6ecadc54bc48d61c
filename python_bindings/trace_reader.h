// actorflow._C._read_recorder_trace: the trace viewer's fast path (see trace_reader.cc).
#pragma once

#include <pybind11/pybind11.h>

namespace actorflow {
void BindTraceReader(pybind11::module_& m);
}  // namespace actorflow
