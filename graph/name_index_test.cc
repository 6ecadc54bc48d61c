#include "graph/name_index.h"

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <unordered_map>

namespace actorflow {
namespace graph {
namespace {

TEST(NameIndex, InsertFindAssign) {
  NameIndex index;
  EXPECT_EQ(index.Find("a"), NameIndex::kNone);
  EXPECT_TRUE(index.Insert("a", 3));
  EXPECT_TRUE(index.Insert("", 4));  // the empty name is a name
  EXPECT_FALSE(index.Insert("a", 9));  // present: unchanged
  EXPECT_EQ(index.Find("a"), 3u);
  EXPECT_EQ(index.Find(""), 4u);
  index.Assign("a", 7);
  index.Assign("b", 8);
  EXPECT_EQ(index.Find("a"), 7u);
  EXPECT_EQ(index.Find("b"), 8u);
  EXPECT_TRUE(index.Contains("b"));
  EXPECT_FALSE(index.Contains("ab"));
  EXPECT_EQ(index.size(), 3u);
}

TEST(NameIndex, RetainIfErasesAndMovesAndErasedNamesComeBack) {
  NameIndex index;
  for (size_t i = 0; i < 100; ++i) index.Insert("node_" + std::to_string(i), i);
  // Keep the even ones, renumbered.
  index.RetainIf([](std::string_view name, size_t& position) {
    if (position % 2 != 0) return false;
    EXPECT_EQ(name, "node_" + std::to_string(position));
    position /= 2;
    return true;
  });
  EXPECT_EQ(index.size(), 50u);
  for (size_t i = 0; i < 100; ++i)
    EXPECT_EQ(index.Find("node_" + std::to_string(i)), i % 2 == 0 ? i / 2 : NameIndex::kNone) << i;
  for (size_t i = 1; i < 100; i += 2) EXPECT_TRUE(index.Insert("node_" + std::to_string(i), 1000 + i));
  for (size_t i = 1; i < 100; i += 2) EXPECT_EQ(index.Find("node_" + std::to_string(i)), 1000 + i);
  EXPECT_EQ(index.size(), 100u);
}

TEST(NameIndex, CopiesOwnTheirNames) {
  auto original = std::make_unique<NameIndex>();
  const std::string long_name(100, 'x');
  original->Insert(long_name, 1);
  original->Insert("short", 2);
  NameIndex copy = *original;
  original->Assign("short", 5);
  original.reset();  // the copy's keys do not point into the original
  EXPECT_EQ(copy.Find(long_name), 1u);
  EXPECT_EQ(copy.Find("short"), 2u);
  NameIndex moved = std::move(copy);
  EXPECT_EQ(moved.Find(long_name), 1u);
}

// Random inserts, assigns, erasures (RetainIf) and lookups agree with std::unordered_map.
TEST(NameIndex, AgreesWithAHashMapUnderRandomOperations) {
  std::mt19937 random(7);
  NameIndex index;
  std::unordered_map<std::string, size_t> model;
  auto name = [&] { return "op_" + std::to_string(random() % 3000) + (random() % 2 ? "-grad" : ""); };
  for (int step = 0; step < 40000; ++step) {
    const int what = static_cast<int>(random() % 100);
    if (what < 45) {
      const std::string n = name();
      const size_t position = random() % 100000;
      EXPECT_EQ(index.Insert(n, position), model.emplace(n, position).second);
    } else if (what < 60) {
      const std::string n = name();
      const size_t position = random() % 100000;
      index.Assign(n, position);
      model[n] = position;
    } else if (what < 61) {
      const size_t modulus = 2 + random() % 5;
      index.RetainIf([&](std::string_view n, size_t& position) {
        if (position % modulus == 0) return false;
        ++position;
        return true;
      });
      for (auto it = model.begin(); it != model.end();)
        if (it->second % modulus == 0) it = model.erase(it); else ++(it++)->second;
    } else {
      const std::string n = name();
      auto found = model.find(n);
      ASSERT_EQ(index.Find(n), found == model.end() ? NameIndex::kNone : found->second) << n << " at step " << step;
    }
    ASSERT_EQ(index.size(), model.size()) << "step " << step;
  }
}

}  // namespace
}  // namespace graph
}  // namespace actorflow
