// The canonical key of a traced job (session/job_cache.h): its structure as text, every node by
// its position instead of its name, variables by the position of their first node. Two traces
// get one key exactly when they differ in names and source lines only.
//
// The node part can be written as the trace grows (JobBuilder does, each node when it is added
// and still in cache) instead of in one walk over the whole trace at compile time.
#pragma once

#include <string>

#include "graph/graph.h"

namespace actorflow {
namespace graph {

// Appends `node`'s part of the key of `traced` (which holds it and every node it refers to).
void AppendNodeKey(const Graph& traced, const Node& node, std::string* key);

// The key of `traced` compiled with `register_num` registers. `node_part`: every node's part,
// in order, as AppendNodeKey wrote them; null: written here.
std::string JobKey(const Graph& traced, int register_num, const std::string* node_part);

}  // namespace graph
}  // namespace actorflow
