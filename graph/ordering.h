// The refs some op writes in place: the ordering pass (graph/ordering.cc) runs their readers
// before the writer, and lowering (graph/lowering.cc) keeps them out of views and marks the
// variables that are not written read-only. Internal to graph/.
#pragma once

#include <set>
#include <string>

#include "graph/graph.h"

namespace actorflow {
namespace graph {
namespace ordering_detail {

// Refs some op writes in place (variables under an optimizer, batch-norm moving statistics),
// numbered 0, 1, ... in the order their first writers come (a flat table: a training job has
// one per variable).
NameIndex InPlaceWrittenRefs(const Graph& graph);

}  // namespace ordering_detail
}  // namespace graph
}  // namespace actorflow
