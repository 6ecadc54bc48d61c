#include "graph/memory_plan.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>
#include <queue>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "graph/plan_order.h"

namespace actorflow {
namespace graph {
namespace {

// Registers the runtime gives one register whatever the plan says (variables) or the plan does.
bool SingleRegister(const plan::Task& task, const plan::RegisterDesc& reg) {
  return task.kind() == plan::VARIABLE || reg.register_num() <= 1;
}

std::string Name(const plan::Plan& plan, int task, int reg) {
  return "register '" + plan.tasks(task).registers(reg).name() + "' of task '" + plan.tasks(task).name() + "'";
}

// Register `first` of task `a` may share bytes with register `second` of task `b`, first's
// lifetime before second's (memory_plan.h): a's readers before b, b's readers before a's next act.
bool InOrder(const PlanOrder& order, int a, int first, int b, int second) {
  const PlanOrder::Range first_readers = order.Readers(a, first);
  const PlanOrder::Range second_readers = order.Readers(b, second);
  if (first_readers.empty() || second_readers.empty()) return false;
  for (int c : first_readers)
    if (!order.Before(c, b)) return false;
  for (int c : second_readers)
    if (!order.BeforeNext(c, a)) return false;
  return true;
}

// Registers some task writes in place, and registers read whole: never shared nor reduced.
// One flag per register of the plan (PlanTasks' global register index).
std::vector<uint8_t> PinnedRegisters(const PlanTasks& tasks) {
  std::vector<uint8_t> pinned(static_cast<size_t>(tasks.register_count()), 0);
  for (int i = 0; i < tasks.input_begin(tasks.size()); ++i) {
    if ((tasks.input_flags(i) & (PlanTasks::kWhole | PlanTasks::kWritten)) == 0) continue;
    const int producer = tasks.producer(i);
    if (producer < 0) continue;
    const int reg = tasks.producer_register(i);
    if (reg >= 0 && reg < tasks.registers(producer)) pinned[static_cast<size_t>(tasks.register_begin(producer) + reg)] = 1;
  }
  return pinned;
}

// Registers that may share memory or lose registers (memory_plan.h "Shared"); `r` is register
// `r - tasks.register_begin(t)` of task t.
bool Eligible(const PlanTasks& tasks, const PlanOrder& order, const std::vector<uint8_t>& pinned, int t, int r) {
  return (tasks.task_flags(t) & PlanTasks::kShareableKind) != 0 &&
         (tasks.register_flags(r) & (PlanTasks::kHostPlain | PlanTasks::kSharedMemory)) == PlanTasks::kHostPlain &&
         !pinned[static_cast<size_t>(r)] && tasks.register_bytes(r) > 0 &&
         !order.Readers(t, r - tasks.register_begin(t)).empty();
}

struct Candidate {
  int task, reg;
  int64_t bytes, offset = -1;
};

// Up to this many candidates, each pair is asked about (placement by size packs tighter); more
// are placed in slots in plan order, asking a bounded number of questions per register.
constexpr size_t kPairwiseCandidates = 512;
// Free slots a register tries each way (at least its size, then smaller) before it takes a new one.
constexpr size_t kSlotsTried = 32;

// Largest first (ties: plan order), each at the lowest offset clear of the placed registers it
// is not ordered with. The placed ones are kept by offset: the scan moves the window past each
// conflicting one in its way and asks about order only for those overlapping the window (every
// one it passes either is ordered with the candidate or ends at or below the window, which only
// moves up). Returns the block's size.
int64_t PlaceLargestFirst(const PlanOrder& order, std::vector<Candidate>& candidates) {
  std::vector<size_t> by_size(candidates.size());
  for (size_t k = 0; k < by_size.size(); ++k) by_size[k] = k;
  std::stable_sort(by_size.begin(), by_size.end(),
                   [&](size_t a, size_t b) { return candidates[a].bytes > candidates[b].bytes; });
  int64_t block_bytes = 0;
  std::vector<size_t> by_offset;  // placed candidates, ascending offset
  for (size_t k : by_size) {
    Candidate& c = candidates[k];
    int64_t offset = 0;
    for (size_t j : by_offset) {
      const Candidate& placed = candidates[j];
      if (placed.offset >= offset + c.bytes) break;  // the window fits below it, and below all after it
      if (placed.offset + placed.bytes <= offset) continue;
      if (InOrder(order, c.task, c.reg, placed.task, placed.reg) ||
          InOrder(order, placed.task, placed.reg, c.task, c.reg))
        continue;
      offset = placed.offset + placed.bytes;
    }
    c.offset = offset;
    by_offset.insert(std::upper_bound(by_offset.begin(), by_offset.end(), offset,
                                      [&](int64_t value, size_t j) { return value < candidates[j].offset; }),
                     k);
    block_bytes = std::max(block_bytes, offset + c.bytes);
  }
  return block_bytes;
}

// Slots: disjoint byte ranges, each holding a sequence of registers O1, O2, ..., each in order
// before the next. A register Y joins a slot when the last one's readers run before Y's producer
// (then every earlier one's do too: each Oj's readers run before O(j+1)'s producer, and so on)
// and Y's readers run before the first one's producer's next act (which runs before every later
// one's next act): Y is then in order after every register of the slot. Registers come in plan
// order; a slot is free once its last register's readers are all before the new one in plan
// order (a reader after it cannot run before it). Free slots are kept by size: Y takes the
// smallest one at least its size that fits (best fit), else the largest smaller one (least
// growth), trying a bounded number each way; else a new slot. A slot grows to its largest
// register; offsets are the slots' sizes summed. O(registers log registers). Returns the
// block's size.
int64_t PlaceInSlots(const PlanOrder& order, std::vector<Candidate>& candidates) {
  struct Slot {
    int64_t bytes = 0;
    size_t first = 0, last = 0;
  };
  std::vector<Slot> slots;
  std::vector<int> slot_of(candidates.size());
  // Busy slots by the plan position of their last register's last reader (smallest on top).
  std::priority_queue<std::pair<int, int>, std::vector<std::pair<int, int>>, std::greater<>> busy;
  // Free slots as (bytes, -slot): by size, then the newest slot first. A newer slot's first
  // register comes later in the plan, so more back edges lie above its producer and more
  // registers may follow it (the second condition above).
  std::set<std::pair<int64_t, int>> free;
  auto last_reader = [&](const Candidate& c) { return order.Readers(c.task, c.reg).back(); };
  for (size_t k = 0; k < candidates.size(); ++k) {
    const Candidate& y = candidates[k];
    while (!busy.empty() && busy.top().first < y.task) {
      const int s = busy.top().second;
      free.emplace(slots[s].bytes, -s);
      busy.pop();
    }
    auto fits = [&](const Slot& slot) {
      const Candidate& last = candidates[slot.last];
      const Candidate& first = candidates[slot.first];
      for (int c : order.Readers(last.task, last.reg))
        if (!order.Before(c, y.task)) return false;
      for (int c : order.Readers(y.task, y.reg))
        if (!order.BeforeNext(c, first.task)) return false;
      return true;
    };
    auto chosen = free.end();
    const auto at_least = free.lower_bound({y.bytes, std::numeric_limits<int>::min()});
    size_t tried = 0;
    for (auto it = at_least; it != free.end() && tried < kSlotsTried; ++it, ++tried)
      if (fits(slots[-it->second])) {
        chosen = it;
        break;
      }
    tried = 0;
    for (auto it = at_least; chosen == free.end() && it != free.begin() && tried < kSlotsTried; ++tried) {
      --it;
      if (fits(slots[-it->second])) chosen = it;
    }
    int slot_index;
    if (chosen != free.end()) {
      slot_index = -chosen->second;
      free.erase(chosen);
      slots[slot_index].bytes = std::max(slots[slot_index].bytes, y.bytes);
      slots[slot_index].last = k;
    } else {
      slot_index = static_cast<int>(slots.size());
      slots.push_back(Slot{y.bytes, k, k});
    }
    slot_of[k] = slot_index;
    busy.emplace(last_reader(y), slot_index);
  }
  std::vector<int64_t> offsets(slots.size());
  int64_t block_bytes = 0;
  for (size_t s = 0; s < slots.size(); ++s) {
    offsets[s] = block_bytes;
    block_bytes += slots[s].bytes;
  }
  for (size_t k = 0; k < candidates.size(); ++k) candidates[k].offset = offsets[slot_of[k]];
  return block_bytes;
}

std::string Bytes(int64_t bytes) {
  char text[32];
  if (bytes >= (int64_t{1} << 20)) std::snprintf(text, sizeof(text), "%.2f MiB", bytes / 1048576.0);
  else if (bytes >= 1024) std::snprintf(text, sizeof(text), "%.1f KiB", bytes / 1024.0);
  else std::snprintf(text, sizeof(text), "%lld B", static_cast<long long>(bytes));
  return text;
}

// A register in a shared block: its bytes there and which it is.
struct Placed {
  int64_t begin, end;
  int task, reg;
};

// Adds register r of task t (which has shared memory) to its block in `blocks` (one per block
// of the plan), checking that the block exists and that the register may share at all.
Status CollectPlaced(const plan::Plan& plan, const PlanOrder& order, int t, int r,
                     std::vector<std::vector<Placed>>& blocks) {
  const plan::RegisterDesc& reg = plan.tasks(t).registers(r);
  const int b = reg.shared_memory().block();
  if (b < 0 || b >= plan.memory_blocks_size())
    return Internal("plan '" + plan.job_name() + "': " + Name(plan, t, r) + " is in memory block " +
                    std::to_string(b) + " of " + std::to_string(plan.memory_blocks_size()));
  if (reg.register_num() != 1 || order.Readers(t, r).empty())
    return Internal("plan '" + plan.job_name() + "': " + Name(plan, t, r) +
                    " shares memory but has register_num " + std::to_string(reg.register_num()) + " and " +
                    std::to_string(order.Readers(t, r).size()) + " readers (expected 1 and some)");
  const int64_t begin = reg.shared_memory().byte_offset();
  blocks[b].push_back(Placed{begin, begin + RegisterBytes(reg), t, r});
  return Status::Ok();
}

// Every two registers of a block whose bytes overlap are ordered (memory_plan.h).
Status VerifyBlocks(const plan::Plan& plan, const PlanOrder& order, std::vector<std::vector<Placed>>& blocks) {
  auto unordered = [&](const Placed& a, const Placed& b) {
    return Internal("plan '" + plan.job_name() + "': " + Name(plan, a.task, a.reg) + " and " +
                    Name(plan, b.task, b.reg) +
                    " share bytes of a memory block, but the plan does not order their lifetimes");
  };
  for (std::vector<Placed>& placed : blocks) {
    std::sort(placed.begin(), placed.end(), [](const Placed& a, const Placed& b) {
      return std::make_tuple(a.begin, a.task, a.reg) < std::make_tuple(b.begin, b.task, b.reg);
    });
    // Registers at one offset (a slot's sequence) in plan order X1, X2, ...: when each one's
    // readers run before the next one's producer and each one's readers before X1's producer's
    // next act, every two of them are in order (memory_plan.h; the argument of PlaceInSlots),
    // checked in a step per register instead of one per pair.
    std::vector<size_t> group_end(placed.size());
    std::vector<char> group_ordered(placed.size(), 0);
    for (size_t start = 0; start < placed.size();) {
      size_t end = start + 1;
      while (end < placed.size() && placed[end].begin == placed[start].begin) ++end;
      bool ordered = true;
      for (size_t k = start + 1; k < end && ordered; ++k) {
        const Placed& previous = placed[k - 1];
        const Placed& next = placed[k];
        for (int c : order.Readers(previous.task, previous.reg)) ordered = ordered && order.Before(c, next.task);
        for (int c : order.Readers(next.task, next.reg)) ordered = ordered && order.BeforeNext(c, placed[start].task);
      }
      for (size_t k = start; k < end; ++k) {
        group_end[k] = end;
        group_ordered[k] = ordered ? 1 : 0;
      }
      start = end;
    }
    // Every other overlapping pair on its own: registers of shifted offsets (largest-first
    // placement) and, where the sequence's check failed, the pairs of its group.
    for (size_t i = 0; i < placed.size(); ++i)
      for (size_t j = group_ordered[i] ? group_end[i] : i + 1; j < placed.size() && placed[j].begin < placed[i].end;
           ++j) {
        const Placed& a = placed[i];
        const Placed& b = placed[j];
        if (!InOrder(order, a.task, a.reg, b.task, b.reg) && !InOrder(order, b.task, b.reg, a.task, a.reg))
          return unordered(a, b);
      }
  }
  return Status::Ok();
}


// Every register with shared memory of `plan`, checked as VerifySharedMemory says.
Status VerifyPlaced(const plan::Plan& plan, const PlanOrder& order) {
  std::vector<std::vector<Placed>> blocks(plan.memory_blocks_size());
  for (int t = 0; t < plan.tasks_size(); ++t)
    for (int r = 0; r < plan.tasks(t).registers_size(); ++r)
      if (plan.tasks(t).registers(r).has_shared_memory()) AF_RETURN_IF_ERROR(CollectPlaced(plan, order, t, r, blocks));
  return VerifyBlocks(plan, order, blocks);
}


}  // namespace

std::string MemoryReport::ToString() const {
  char ratio[32] = "";
  if (largest_live_bytes > 0)
    std::snprintf(ratio, sizeof(ratio), " (%.2fx)", static_cast<double>(register_bytes) / largest_live_bytes);
  return "registers " + Bytes(register_bytes) + ratio + ", largest live set " + Bytes(largest_live_bytes) +
         ", unshared " + Bytes(unshared_register_bytes) + "; " + std::to_string(registers) + " registers, " +
         std::to_string(shared_registers) + " in " + std::to_string(memory_blocks) + " shared block" +
         (memory_blocks == 1 ? "" : "s") + ", " + std::to_string(single_registers) + " single; variables " +
         Bytes(variable_bytes);
}

MemoryReport PlanMemoryReport(const plan::Plan& plan) {
  MemoryReport report;
  std::unordered_map<int64_t, int> index_of;
  for (int t = 0; t < plan.tasks_size(); ++t) index_of.emplace(plan.tasks(t).id(), t);
  for (const plan::MemoryBlock& block : plan.memory_blocks()) report.register_bytes += block.byte_size();
  report.memory_blocks = plan.memory_blocks_size();
  // Live intervals in plan order: [producer, last reader]; +bytes at the start, -bytes after the end.
  std::vector<int64_t> change(plan.tasks_size() + 1, 0);
  std::map<std::pair<int, int>, int> last_reader;
  for (int t = 0; t < plan.tasks_size(); ++t)
    for (const plan::InputDesc& in : plan.tasks(t).inputs()) {
      auto found = index_of.find(in.producer_task_id());
      if (found == index_of.end()) continue;
      int& last = last_reader[{found->second, in.producer_register()}];
      last = std::max(last, t);
    }
  for (int t = 0; t < plan.tasks_size(); ++t) {
    const plan::Task& task = plan.tasks(t);
    for (int r = 0; r < task.registers_size(); ++r) {
      const plan::RegisterDesc& reg = task.registers(r);
      const int64_t bytes = RegisterBytes(reg);
      if (bytes == 0) continue;
      if (task.kind() == plan::VARIABLE) {
        report.variable_bytes += bytes;
        continue;
      }
      ++report.registers;
      const int64_t copies = std::max(1, reg.register_num());
      if (reg.register_num() <= 1) ++report.single_registers;
      if (reg.has_shared_memory()) ++report.shared_registers;
      if (!reg.has_slice_of()) {  // a slice lives in its owner's reserved block
        report.unshared_register_bytes += copies * bytes;
        if (!reg.has_shared_memory()) report.register_bytes += copies * bytes;
        auto last = last_reader.find({t, r});
        const int end = last == last_reader.end() ? t : last->second;
        change[t] += bytes;
        change[end + 1] -= bytes;
      }
    }
  }
  int64_t live = 0;
  for (int t = 0; t < plan.tasks_size(); ++t) {
    live += change[t];
    report.largest_live_bytes = std::max(report.largest_live_bytes, live);
  }
  return report;
}

std::string MemoryPlanText(const plan::Plan& plan) {
  std::string text = "job '" + plan.job_name() + "': " + PlanMemoryReport(plan).ToString() + "\n";
  for (const plan::MemoryBlock& block : plan.memory_blocks()) text += "shared block: " + Bytes(block.byte_size()) + "\n";
  for (const plan::Task& task : plan.tasks())
    for (const plan::RegisterDesc& reg : task.registers()) {
      const int64_t bytes = RegisterBytes(reg);
      if (bytes == 0) continue;
      text += "  " + task.name() + " " + reg.name() + ": " + Bytes(bytes) + " x" + std::to_string(reg.register_num());
      if (task.kind() == plan::VARIABLE) text += " variable";
      if (reg.has_shared_memory()) text += " shared +" + std::to_string(reg.shared_memory().byte_offset());
      if (reg.has_slice_of()) text += " slice of task #" + std::to_string(reg.slice_of().task_id());
      text += "\n";
    }
  return text;
}

Status PlanRegisterMemory(plan::Plan& plan) {
  if (plan.memory_blocks_size() > 0) return Status::Ok();
  AF_ASSIGN_OR_RETURN(const PlanTasks tasks, PlanTasks::Of(plan));
  return PlanRegisterMemory(plan, tasks);
}

Status PlanRegisterMemory(plan::Plan& plan, const PlanTasks& tasks) {
  if (plan.memory_blocks_size() > 0) return Status::Ok();
  if (!tasks.all_on_machine_zero()) return Status::Ok();
  // Without a back edge (a single register some task reads, or serial iterations) no task waits
  // for an earlier iteration: nothing is lowered and nothing may share. Checked first, so that
  // predict jobs skip building the ordering facts.
  bool back_edges = plan.serial_iterations();
  const int n = tasks.size();
  for (int i = 0; i < tasks.input_begin(n) && !back_edges; ++i) {
    const int p = tasks.producer(i);
    if (p < 0 || tasks.read_only_variable(p)) continue;
    const int reg = tasks.producer_register(i);
    back_edges = reg >= 0 && reg < tasks.registers(p) &&
                 ((tasks.task_flags(p) & PlanTasks::kVariable) != 0 || tasks.register_num(tasks.register_begin(p) + reg) <= 1);
  }
  if (!back_edges) return Status::Ok();
  AF_ASSIGN_OR_RETURN(PlanOrder order, PlanOrder::Of(plan, tasks));
  const std::vector<uint8_t> pinned = PinnedRegisters(tasks);
  // One register where the producer's next act already waits for this iteration's work.
  // Decided, and the registers placed, on the facts of the plan before the change: lowering
  // only adds back edges, so every fact stays true (some new ones go unused).
  std::vector<int> register_num(static_cast<size_t>(tasks.register_count()));
  for (int r = 0; r < tasks.register_count(); ++r) register_num[r] = tasks.register_num(r);
  for (int t = 0; t < n; ++t)
    for (int r = tasks.register_begin(t); r < tasks.register_begin(t + 1); ++r)
      if (register_num[r] > 1 && Eligible(tasks, order, pinned, t, r) && order.AnyBeforeNext(t)) {
        plan.mutable_tasks(t)->mutable_registers(r - tasks.register_begin(t))->set_register_num(1);
        register_num[r] = 1;
      }

  // Candidates: eligible single registers, in plan order.
  std::vector<Candidate> candidates;
  for (int t = 0; t < n; ++t)
    for (int r = tasks.register_begin(t); r < tasks.register_begin(t + 1); ++r)
      if (register_num[r] == 1 && Eligible(tasks, order, pinned, t, r))
        candidates.push_back(Candidate{t, r - tasks.register_begin(t), tasks.register_bytes(r)});
  if (candidates.size() < 2) return Status::Ok();
  int64_t block_bytes = 0, total_bytes = 0;
  for (const Candidate& c : candidates) total_bytes += c.bytes;
  if (candidates.size() <= kPairwiseCandidates) {
    block_bytes = PlaceLargestFirst(order, candidates);
  } else {
    block_bytes = PlaceInSlots(order, candidates);
  }
  if (block_bytes == total_bytes) return Status::Ok();  // nothing overlaps: own memory is as good
  plan::MemoryBlock* block = plan.add_memory_blocks();
  block->set_byte_size(block_bytes);
  for (const Candidate& c : candidates) {
    plan::SharedMemory* shared = plan.mutable_tasks(c.task)->mutable_registers(c.reg)->mutable_shared_memory();
    shared->set_block(0);
    shared->set_byte_offset(c.offset);
  }
  // The placement checked pair by pair (on the same facts), as VerifySharedMemory would: the
  // candidates where they were placed, and any register that had shared memory before.
  std::vector<std::vector<Placed>> blocks(1);
  for (const Candidate& c : candidates) blocks[0].push_back(Placed{c.offset, c.offset + c.bytes, c.task, c.reg});
  for (int t = 0; t < n; ++t)
    for (int r = tasks.register_begin(t); r < tasks.register_begin(t + 1); ++r)
      if ((tasks.register_flags(r) & PlanTasks::kSharedMemory) != 0)
        AF_RETURN_IF_ERROR(CollectPlaced(plan, order, t, r - tasks.register_begin(t), blocks));
  return VerifyBlocks(plan, order, blocks);
}

Status VerifySharedMemory(const plan::Plan& plan) {
  if (plan.memory_blocks_size() == 0) return Status::Ok();
  AF_ASSIGN_OR_RETURN(PlanOrder order, PlanOrder::Of(plan));
  return VerifyPlaced(plan, order);
}

StatusOr<bool> RegistersMayShareInOrder(const plan::Plan& plan, int64_t first_task, int first, int64_t second_task,
                                        int second) {
  AF_ASSIGN_OR_RETURN(PlanOrder order, PlanOrder::Of(plan));
  int a = -1, b = -1;
  for (int t = 0; t < plan.tasks_size(); ++t) {
    if (plan.tasks(t).id() == first_task) a = t;
    if (plan.tasks(t).id() == second_task) b = t;
  }
  if (a < 0 || b < 0 || first < 0 || first >= plan.tasks(a).registers_size() || second < 0 ||
      second >= plan.tasks(b).registers_size())
    return InvalidArgument("RegistersMayShareInOrder: no register " + std::to_string(first) + " of task #" +
                           std::to_string(first_task) + " or " + std::to_string(second) + " of task #" +
                           std::to_string(second_task));
  if (!SingleRegister(plan.tasks(a), plan.tasks(a).registers(first)) ||
      !SingleRegister(plan.tasks(b), plan.tasks(b).registers(second)))
    return false;
  return InOrder(order, a, first, b, second);
}

}  // namespace graph
}  // namespace actorflow
