#include "actors/iteration_ring.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace actorflow {
namespace {

struct Record {
  std::vector<int> buffer;
  int value = 0;
};

TEST(IterationRing, FindsConsecutiveIterationsAndPopsInOrder) {
  IterationRing<Record> ring(2);
  EXPECT_TRUE(ring.empty());
  EXPECT_EQ(ring.Find(0), nullptr);
  ring.Append(5).value = 50;
  ring.Append(6).value = 60;
  EXPECT_EQ(ring.front_iteration(), 5);
  ASSERT_NE(ring.Find(6), nullptr);
  EXPECT_EQ(ring.Find(6)->value, 60);
  EXPECT_EQ(ring.Find(4), nullptr);
  EXPECT_EQ(ring.Find(7), nullptr);
  EXPECT_EQ(ring.Front().value, 50);
  ring.PopFront();
  EXPECT_EQ(ring.front_iteration(), 6);
  EXPECT_EQ(ring.Find(5), nullptr);
  EXPECT_EQ(ring.Front().value, 60);
  ring.PopFront();
  EXPECT_TRUE(ring.empty());
  ring.Append(100).value = 1;  // empty: any iteration may start it
  EXPECT_EQ(ring.Find(100)->value, 1);
}

// Growing keeps every record's address (a sink holds a pointer to its iteration's outputs)
// and the order, also when the records wrapped around the end of the slots.
TEST(IterationRing, GrowingKeepsAddressesAndOrder) {
  IterationRing<Record> ring(4);
  for (int64_t i = 0; i < 3; ++i) ring.Append(i);
  ring.PopFront();
  ring.PopFront();  // the front is now in the middle of the slots
  std::vector<Record*> addresses;
  for (int64_t i = 2; i < 20; ++i) {
    if (i > 2) ring.Append(i);
    ring.Find(i)->value = static_cast<int>(10 * i);
  }
  EXPECT_GE(ring.capacity(), size_t{18});
  for (int64_t i = 2; i < 20; ++i) addresses.push_back(ring.Find(i));
  for (int64_t i = 20; i < 40; ++i) ring.Append(i).value = static_cast<int>(10 * i);  // grows again
  for (int64_t i = 2; i < 20; ++i) {
    EXPECT_EQ(ring.Find(i), addresses[i - 2]) << "iteration " << i << " moved";
    EXPECT_EQ(ring.Find(i)->value, 10 * i);
  }
  for (int64_t i = 2; i < 40; ++i) {
    ASSERT_EQ(ring.front_iteration(), i);
    EXPECT_EQ(ring.Front().value, 10 * i);
    ring.PopFront();
  }
  EXPECT_TRUE(ring.empty());
}

// In steady state (never more in flight than the slots) nothing is allocated: the slots and
// their buffers' capacity are reused.
TEST(IterationRing, SteadyStateReusesSlotsAndBuffers) {
  IterationRing<Record> ring(2);
  ring.Append(0).buffer.assign(64, 1);
  const int* first_buffer = ring.Front().buffer.data();
  ring.PopFront();
  ring.Append(1).buffer.assign(8, 2);
  ring.PopFront();
  Record& again = ring.Append(2);  // the first slot again
  const std::vector<int> small(16, 3);
  again.buffer = small;  // fits the kept capacity
  EXPECT_EQ(again.buffer.data(), first_buffer);
  EXPECT_EQ(ring.capacity(), size_t{2});
}

TEST(IterationRingDeathTest, OutOfOrderAppendIsAnInternalError) {
  IterationRing<Record> ring;
  ring.Append(0);
  EXPECT_DEATH(ring.Append(2), "in order");
}

}  // namespace
}  // namespace actorflow
