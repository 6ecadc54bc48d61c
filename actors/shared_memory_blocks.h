// Plan-wide memory blocks shared by registers whose lifetimes never overlap (plan.proto
// Plan.memory_blocks, RegisterDesc.shared_memory). The compiler decides who shares
// (graph/memory_plan.h) and answers for it; the runtime allocates each block once and checks
// only what it can see in one register: the layout. Internal to the runtime: Runtime::Create
// calls these once, before any message flows.
#pragma once

#include <memory>
#include <vector>

#include "actors/memory.h"
#include "actors/status.h"
#include "actors/proto/plan.pb.h"

namespace actorflow {

// Allocates every block of `plan` (zeroed, `alignment`-aligned) into `memory`; one pointer per
// block. InvalidArgument naming the block for a size <= 0 or a memory case without allocator.
StatusOr<std::vector<char*>> AllocateSharedBlocks(const plan::Plan& plan, const AllocatorRegistry& allocators,
                                                  RegisterMemory& memory, size_t alignment);

// The memory of register `reg` of `task`, which has shared_memory set and whose blobs take
// `bytes`: `blocks[block] + byte_offset`. InvalidArgument naming the task and register unless
// it is one register (register_num 1) of a compute task or a source, with no reserved block nor slice, in
// its block's memory case, at an offset that is a multiple of `alignment`, inside the block.
StatusOr<char*> SharedRegisterMemory(const plan::Plan& plan, const plan::Task& task, const plan::RegisterDesc& reg,
                                     size_t bytes, const std::vector<char*>& blocks, size_t alignment);

}  // namespace actorflow
