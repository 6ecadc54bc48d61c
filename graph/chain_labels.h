// Chain labels: a test of ancestry in a DAG in linear time and memory, sufficient but not
// necessary. A few chains (paths; each the one with the most nodes no earlier chain holds) are
// numbered along their length; each node gets, per chain, the last position at or above it
// (`above`) and the first at or below it (`below`). When below(u) <= above(t) on some chain,
// u reaches that chain's node at below(u), which reaches the one at above(t), which reaches t:
// u is t or an ancestor of t. When no chain says so, u may still be an ancestor (through nodes
// off the chains): callers that need exact answers search then (AncestorIndex).
//
// On the graphs the compiler emits (a forward and a backward spine, weight-gradient and update
// branches hanging off them) the longest path carries nearly every ancestry asked about.
#pragma once

#include <algorithm>
#include <limits>
#include <vector>

namespace actorflow {
namespace graph {

struct ChainLabels {
  static constexpr int kNone = std::numeric_limits<int>::max();
  int nodes = 0;
  int chains = 0;
  std::vector<int> above;  // [chain * nodes + node]; -1: no chain node at or above
  std::vector<int> below;  // [chain * nodes + node]; kNone: no chain node at or below

  // Whether u is t or an ancestor of t, as far as the chains see.
  bool Reaches(int u, int t) const {
    for (int k = 0; k < chains; ++k) {
      const size_t base = static_cast<size_t>(k) * nodes;
      if (below[base + u] <= above[base + t]) return true;
    }
    return false;
  }

  // `parents(t)`: an iterable of t's parents, each numbered below t (topological order), for t
  // in [0, n). At most `most_chains` chains, each adding at least `least_new` nodes.
  template <typename Parents>
  static ChainLabels Of(int n, const Parents& parents, int most_chains = 4, int least_new = 2) {
    ChainLabels labels;
    labels.nodes = n;
    std::vector<char> covered(n, 0);
    std::vector<int> best(n), from(n);
    std::vector<std::vector<int>> paths;
    while (static_cast<int>(paths.size()) < most_chains && n > 0) {
      for (int t = 0; t < n; ++t) {
        int most = 0, via = -1;
        for (int p : parents(t))
          if (via < 0 || best[p] > most) {
            most = best[p];
            via = p;
          }
        best[t] = (covered[t] ? 0 : 1) + most;
        from[t] = via;
      }
      const int end = static_cast<int>(std::max_element(best.begin(), best.end()) - best.begin());
      if (best[end] < least_new) break;
      std::vector<int> path;
      for (int t = end; t >= 0; t = from[t]) path.push_back(t);
      std::reverse(path.begin(), path.end());
      for (int t : path) covered[t] = 1;
      paths.push_back(std::move(path));
    }
    labels.chains = static_cast<int>(paths.size());
    labels.above.assign(static_cast<size_t>(labels.chains) * n, -1);
    labels.below.assign(static_cast<size_t>(labels.chains) * n, kNone);
    for (int k = 0; k < labels.chains; ++k) {
      int* above = &labels.above[static_cast<size_t>(k) * n];
      int* below = &labels.below[static_cast<size_t>(k) * n];
      for (size_t position = 0; position < paths[k].size(); ++position) {
        above[paths[k][position]] = static_cast<int>(position);
        below[paths[k][position]] = static_cast<int>(position);
      }
      for (int t = 0; t < n; ++t)
        for (int p : parents(t)) above[t] = std::max(above[t], above[p]);
      // below(p) = min over children: pushed from each child to its parents, children last first.
      for (int t = n - 1; t >= 0; --t)
        for (int p : parents(t)) below[p] = std::min(below[p], below[t]);
    }
    return labels;
  }
};

}  // namespace graph
}  // namespace actorflow
