// Register memory planning: registers whose lifetimes never overlap share memory (OneFlow's
// memory sharing), and registers of tasks that cannot run ahead anyway get one register.
//
// When may two registers X (written by task x, read by tasks Cx) and Y (task y, readers Cy)
// share bytes? In the actor runtime a task acts for iteration i once its inputs of iteration i
// are ready and each output has a free register; a register is free again once every reader
// acked it, and a reader acks after its act (or its asynchronous completion) is over. So:
//  - within an iteration, u(i) happens before v(i) when u is an ancestor of v through data or
//    control edges (edges from read-only variables carry no messages and count for nothing);
//  - across iterations, a register with register_num 1 is a back edge: each reader c of it
//    acts for iteration i before its producer p writes it for i + 1 (c(i) before p(i + 1)).
//    A variable (one register, re-announced each iteration once its readers and its in-place
//    updater acked) is such a back edge: this is how a train job's next step waits for the
//    updates of this one. With register_num k >= 2, p may run k iterations ahead: no edge.
// X and Y, each of one register, may overlap in memory when X comes before Y:
//   every reader of X happens before y in the same iteration (X is dead when Y is written), and
//   every reader of Y at iteration i happens before x at iteration i + 1 (Y is dead when X is
//   written again),
// or Y before X likewise. Then every interleaving the runtime allows writes and reads them in
// the order X(0), Y(0), X(1), Y(1), ...: no write lands on bytes still to be read.
//
// register_num is kept where pipelining pays: a compute task whose next iteration already
// waits for some work of this iteration (through back edges: a variable's update, a register
// of one) is not free to run ahead, so its outputs get one register (it can then lead its own
// readers by nothing, where two registers let it lead them by one iteration of whatever its
// ancestors' back edges allow); tasks that can run ahead freely (inference pipelines, the feed
// side of a train job) keep the plan's register_num and share nothing.
//
// Shared: registers of CPU compute tasks (synchronous kernels) and of sources (the host's Push
// fills one once it is free, as an act would) in host memory, one register, with readers, not
// slices of a block nor reserving one, not written in place by any task. A source has no
// ancestors: its next iteration waits for nothing but its own readers, so its registers are
// lowered and shared only in serial plans (Plan.serial_iterations: every act of iteration i
// before any of i + 1). Others (variables, sinks, slice groups, device memory, asynchronous
// tasks) keep their own memory. Plans spread over several machines are not planned (send/recv order
// through the network, which the plan's edges do not show).
#pragma once

#include <cstdint>
#include <string>

#include "actors/status.h"
#include "actors/proto/plan.pb.h"
#include "graph/plan_tasks.h"

namespace actorflow {
namespace graph {

// What a plan's registers take, from the plan alone (PlanMemoryReport).
struct MemoryReport {
  // What the runtime allocates for registers: every own register (register_num of each, a
  // reserved block's full size) and each shared block once. Variables' buffers not included.
  int64_t register_bytes = 0;
  // The same registers each in its own memory, register_num of each: what the plan would take
  // without shared blocks.
  int64_t unshared_register_bytes = 0;
  // The most bytes of registers (one of each, a slice group's block once) live at one task of
  // the plan's order: from its producer's act to its last reader's. A lower bound for any
  // plan of these tasks run in this order: registers live together never share.
  int64_t largest_live_bytes = 0;
  int64_t variable_bytes = 0;   // model state, outside the registers
  int registers = 0;            // registers with bytes (not control registers), variables excluded
  int shared_registers = 0;     // of them, in a shared block
  int single_registers = 0;     // of them, register_num 1 (variables excluded)
  int memory_blocks = 0;
  // One line: "registers 1.2 MB (unshared 3.4 MB), largest live set 1.1 MB, ...".
  std::string ToString() const;
};

MemoryReport PlanMemoryReport(const plan::Plan& plan);

// The report's line, then one line per register with bytes: "task register: bytes xN" and
// "shared +offset" for those in a block. Written beside DOT dumps as <job>.memory.txt (and, for
// a job over several machines, each machine's part as <job>.machine<m>.memory.txt).
std::string MemoryPlanText(const plan::Plan& plan);

// Plans `plan` in place (see above): lowers register_num to 1 where the producer cannot run
// ahead, then places the eligible registers of one register into one host memory block (the
// plan's Plan.memory_blocks(0)) at offsets that overlap only for registers ordered as above:
// largest first, each at the lowest offset clear of every placed register it is not ordered
// with (more than a few hundred registers: in plan order, each joining the best-fitting slot of
// registers freed before it, trying a bounded number). The ordering facts are PlanOrder's
// (graph/plan_order.h): linear in the plan, and sufficient conditions, so a register may miss a
// sharing the exact order would allow but never gets one it does not. Time O(n log n) in tasks,
// edges and registers. A plan with memory blocks already or on several machines is left as it
// is. Internal error if the tasks are not in topological order or if the placement fails
// VerifySharedMemory's check (run on every plan it changes).
Status PlanRegisterMemory(plan::Plan& plan);
// The same on `tasks`, read from `plan` as it is now (PlanTasks::Of; CompileGraph reads them once
// for the in-place order check and this).
Status PlanRegisterMemory(plan::Plan& plan, const PlanTasks& tasks);

// Internal error naming both registers unless every two registers whose byte ranges in a
// shared block overlap are ordered as above in `plan` (CompileGraph checks every plan), as far
// as PlanOrder sees. Registers at one offset are checked as a sequence (a step per register),
// others pair by pair.
Status VerifySharedMemory(const plan::Plan& plan);

// Whether the plan's order lets register `first` of task `first_task` and register `second`
// of task `second_task` share bytes, `first`'s lifetime coming before `second`'s in every
// iteration (above). Both must be registers with register_num 1 and readers. For tests and
// tools; PlanRegisterMemory answers it for many pairs at once.
StatusOr<bool> RegistersMayShareInOrder(const plan::Plan& plan, int64_t first_task, int first, int64_t second_task,
                                        int second);

}  // namespace graph
}  // namespace actorflow
