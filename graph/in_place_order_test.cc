// AncestorIndex against brute force: on random DAGs (mostly local edges, some long ones, the
// shapes the compiler's graphs have), every answer equals plain reachability, also after control
// edges are added during a topological sweep as the ordering pass adds them.
#include "graph/in_place_order.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace actorflow {
namespace graph {
namespace {

// reach[t][u]: u is a strict ancestor of t.
std::vector<std::vector<bool>> Reachability(const std::vector<std::vector<int>>& parents) {
  const size_t n = parents.size();
  std::vector<std::vector<bool>> reach(n, std::vector<bool>(n, false));
  for (size_t t = 0; t < n; ++t)
    for (int p : parents[t]) {
      reach[t][p] = true;
      for (size_t u = 0; u < n; ++u)
        if (reach[p][u]) reach[t][u] = true;
    }
  return reach;
}

std::vector<std::vector<int>> RandomDag(std::mt19937& random, int n) {
  std::vector<std::vector<int>> parents(n);
  for (int t = 1; t < n; ++t) {
    const int count = static_cast<int>(random() % 3);
    for (int k = 0; k < count; ++k)
      parents[t].push_back(random() % 4 == 0 ? static_cast<int>(random() % t)
                                             : std::max(0, t - 1 - static_cast<int>(random() % 3)));
  }
  return parents;
}

TEST(AncestorIndex, AnswersEqualReachability) {
  std::mt19937 random(7);
  int yes = 0, no = 0;
  for (int round = 0; round < 40; ++round) {
    const int n = 20 + static_cast<int>(random() % 200);
    const std::vector<std::vector<int>> parents = RandomDag(random, n);
    const std::vector<std::vector<bool>> reach = Reachability(parents);
    AncestorIndex index(parents);
    for (int t = 0; t < n; ++t)
      for (int u = 0; u < n; ++u) {
        ASSERT_EQ(index.IsAncestor(u, t), static_cast<bool>(reach[t][u])) << "round " << round << ": " << u << " -> " << t;
        (reach[t][u] ? yes : no)++;
      }
  }
  EXPECT_GT(yes, 1000);  // both answers are exercised
  EXPECT_GT(no, 1000);
}

TEST(AncestorIndex, SeesEdgesAddedDuringASweep) {
  std::mt19937 random(8);
  for (int round = 0; round < 40; ++round) {
    const int n = 20 + static_cast<int>(random() % 150);
    std::vector<std::vector<int>> parents = RandomDag(random, n);
    AncestorIndex index(parents);
    // In topological order, as the ordering pass does: add edges into t from earlier nodes that
    // are not yet its ancestors, then check every question about t against brute force.
    for (int t = 1; t < n; ++t) {
      if (random() % 3 == 0) {
        const int from = static_cast<int>(random() % t);
        if (!index.IsAncestor(from, t)) {
          index.AddEdge(t, from);
          parents[t].push_back(from);
        }
      }
      const std::vector<std::vector<bool>> reach = Reachability(parents);
      for (int u = 0; u < n; ++u)
        ASSERT_EQ(index.IsAncestor(u, t), static_cast<bool>(reach[t][u])) << "round " << round << ": " << u << " -> " << t;
    }
  }
}

}  // namespace
}  // namespace graph
}  // namespace actorflow
