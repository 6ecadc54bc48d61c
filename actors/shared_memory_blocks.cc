#include "actors/shared_memory_blocks.h"

#include <string>

namespace actorflow {
namespace {

MemoryCase CaseOf(const plan::MemoryCase& memory_case) {
  return MemoryCase{static_cast<MemoryKind>(memory_case.kind()), memory_case.device_id()};
}

}  // namespace

StatusOr<std::vector<char*>> AllocateSharedBlocks(const plan::Plan& plan, const AllocatorRegistry& allocators,
                                                  RegisterMemory& memory, size_t alignment) {
  std::vector<char*> blocks;
  for (int b = 0; b < plan.memory_blocks_size(); ++b) {
    const plan::MemoryBlock& block = plan.memory_blocks(b);
    const std::string what = "plan: shared memory block " + std::to_string(b);
    if (block.byte_size() <= 0)
      return InvalidArgument(what + " has " + std::to_string(block.byte_size()) + " bytes (expected > 0)");
    const MemoryCase memory_case = CaseOf(block.memory_case());
    auto allocator = allocators.Find(memory_case);
    if (!allocator.ok())
      return InvalidArgument(what + " lives in " + memory_case.ToString() + " memory, but " +
                             allocator.status().message());
    auto data = memory.Allocate(allocator.value(), memory_case, static_cast<size_t>(block.byte_size()), alignment);
    if (!data.ok()) return data.status().WithContext("allocating " + what.substr(6));
    blocks.push_back(static_cast<char*>(data.value()));
  }
  return blocks;
}

StatusOr<char*> SharedRegisterMemory(const plan::Plan& plan, const plan::Task& task, const plan::RegisterDesc& reg,
                                     size_t bytes, const std::vector<char*>& blocks, size_t alignment) {
  const plan::SharedMemory& shared = reg.shared_memory();
  const std::string what = "plan: register '" + reg.name() + "' of task '" + task.name() + "' shares memory block " +
                           std::to_string(shared.block());
  if (shared.block() < 0 || shared.block() >= static_cast<int>(blocks.size()))
    return InvalidArgument(what + ", but the plan has " + std::to_string(blocks.size()) + " blocks");
  if ((task.kind() != plan::COMPUTE && task.kind() != plan::SOURCE) || reg.register_num() != 1 || reg.reserved_byte_size() > 0 || reg.has_slice_of())
    return InvalidArgument(what + ": only one register (register_num 1, here " + std::to_string(reg.register_num()) +
                           ") of a compute task or a source, reserving no block and no slice, can");
  const plan::MemoryBlock& block = plan.memory_blocks(shared.block());
  if (CaseOf(reg.memory_case()) != CaseOf(block.memory_case()))
    return InvalidArgument(what + " but lives in " + CaseOf(reg.memory_case()).ToString() + " memory, the block in " +
                           CaseOf(block.memory_case()).ToString());
  if (shared.byte_offset() < 0 || shared.byte_offset() % static_cast<int64_t>(alignment) != 0 ||
      shared.byte_offset() + static_cast<int64_t>(bytes) > block.byte_size())
    return InvalidArgument(what + " at bytes [" + std::to_string(shared.byte_offset()) + ", " +
                           std::to_string(shared.byte_offset() + static_cast<int64_t>(bytes)) + "), which is not an " +
                           std::to_string(alignment) + "-aligned range inside its " +
                           std::to_string(block.byte_size()) + " bytes");
  return blocks[shared.block()] + shared.byte_offset();
}

}  // namespace actorflow
