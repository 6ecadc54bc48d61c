#include "graph/device_placement.h"

#include <map>
#include <set>
#include <tuple>

#include "actors/device.h"
#include "kernels/op_registry.h"

namespace actorflow {
namespace graph {

Status CheckGpuDevices(int gpu_device_num) {
  std::string why;
  int found = 0;
  auto backend = DeviceRegistry::Global().Find(kCudaDevice);
  if (!backend.ok()) {
    why = "this build of actorflow has no CUDA support";
  } else {
    found = backend.value()->device_count(&why);
  }
  if (found >= gpu_device_num) return Status::Ok();
  const std::string n = std::to_string(gpu_device_num);
  return FailedPrecondition("flow.config.gpu_device_num(" + n + ") asks for " + n +
                            " GPU device(s), but no usable GPU is available: " + std::to_string(found) +
                            " found" + (why.empty() ? "" : " (" + why + ")") + ". Use flow.config.cpu_device_num(" +
                            n + ") for " + n + " CPU devices (and flow.config.gpu_device_num(0))");
}

namespace {

constexpr int kHost = -1;  // where a register lives: kHost or a GPU id
constexpr int kUnread = -2, kMixed = -3;  // a variable's readers: none yet, on several places

bool OnGpu(const plan::Task& task) { return task.kind() == plan::COMPUTE && task.device_type() == "gpu"; }

std::string Where(const plan::Task& task) {
  return "op '" + task.name() + "' (" + task.op_type() + ")" +
         (task.source_location().empty() ? "" : " at " + task.source_location());
}

}  // namespace

Status PlaceOnDevices(plan::Plan& plan) {
  bool any = false;
  for (const plan::Task& task : plan.tasks()) any |= OnGpu(task);
  if (!any) return Status::Ok();
  // A variable read (by data edges) only by ops of one GPU lives on that GPU: its register is
  // device memory (the session keeps the device buffer) and its updates run there.
  std::vector<int> reader_device(plan.tasks_size(), kUnread);
  for (const plan::Task& task : plan.tasks())
    for (const plan::InputDesc& in : task.inputs()) {
      if (in.control()) continue;
      int& seen = reader_device[in.producer_task_id()];
      const int place = OnGpu(task) ? task.device_id() : kHost;
      seen = seen == kUnread || seen == place ? place : kMixed;
    }
  for (plan::Task& task : *plan.mutable_tasks()) {
    if (task.kind() != plan::VARIABLE || task.registers_size() == 0) continue;
    const int device = reader_device[task.id()];
    if (device < 0) continue;  // unread, read on the host, or by several places
    task.mutable_registers(0)->mutable_memory_case()->set_kind(plan::MEMORY_DEVICE);
    task.mutable_registers(0)->mutable_memory_case()->set_device_id(device);
  }
  // Where the blob of a task's register lives: kHost or a GPU id.
  auto place_of_register = [](const plan::Task& task, int register_index) {
    if (OnGpu(task)) return task.device_id();
    const plan::MemoryCase& m = task.registers(register_index).memory_case();
    return m.kind() == plan::MEMORY_DEVICE ? m.device_id() : kHost;
  };
  // Ops writing host registers in place run on the CPU; every other GPU op needs a CUDA kernel.
  for (plan::Task& task : *plan.mutable_tasks()) {
    if (!OnGpu(task)) continue;
    bool writes_host = false;
    const plan::Task& reading = task;
    for (int m : reading.mutable_inputs()) {
      const plan::InputDesc& in = reading.inputs(m);
      writes_host |= place_of_register(plan.tasks(static_cast<int>(in.producer_task_id())), in.producer_register()) !=
                     task.device_id();
    }
    if (writes_host) {
      task.set_device_type("cpu");
      continue;
    }
    auto def = OpRegistry::Global().Find(task.op_type());
    if (!def.ok()) return def.status().WithContext(Where(task));
    if (!def.value()->kernel_factories.count(kCudaDevice))
      return InvalidArgument(Where(task) + " is placed on gpu:" + std::to_string(task.device_id()) + " but '" +
                             task.op_type() + "' has no CUDA kernel; place it on the CPU with "
                             "flow.scope.placement(\"cpu\", \"0:0\")");
  }
  auto place_of = [&](const plan::Task& task) { return OnGpu(task) ? task.device_id() : kHost; };  // where it runs

  plan::Plan placed;
  placed.set_job_name(plan.job_name());
  std::vector<int64_t> new_id(plan.tasks_size(), -1);
  // (new producer id, register, blob, destination) -> the copy task's new id.
  std::map<std::tuple<int64_t, int, int, int>, int64_t> copies;
  // Copies into `destination` (a GPU id or kHost) of what `in` reads of `producer`.
  auto copy_of = [&](const plan::Task& producer, const plan::InputDesc& in, int destination) -> int64_t {
    const auto key = std::make_tuple(new_id[producer.id()], in.producer_register(), in.blob_index(), destination);
    if (auto it = copies.find(key); it != copies.end()) return it->second;
    const int source = place_of_register(producer, in.producer_register());
    const bool to_device = destination != kHost;
    plan::Task* from = placed.mutable_tasks(static_cast<int>(new_id[producer.id()]));
    plan::RegisterDesc* from_register = from->mutable_registers(in.producer_register());
    // The host end of a DMA transfer is pinned where we own the memory (not a variable's buffer).
    if (to_device && from->kind() != plan::VARIABLE && from_register->memory_case().kind() == plan::MEMORY_HOST)
      from_register->mutable_memory_case()->set_kind(plan::MEMORY_PINNED_HOST);
    plan::Task* copy = placed.add_tasks();
    copy->set_id(placed.tasks_size() - 1);
    copy->set_name(producer.name() + (to_device ? "-to-gpu" + std::to_string(destination) : "-to-host") +
                   (in.producer_register() || in.blob_index()
                        ? "-" + std::to_string(in.producer_register()) + "." + std::to_string(in.blob_index())
                        : ""));
    copy->set_kind(plan::COMPUTE);
    copy->set_op_type(to_device ? kCopyHostToDevice : kCopyDeviceToHost);
    copy->set_device_type("gpu");
    copy->set_device_id(to_device ? destination : source);
    copy->set_machine_id(producer.machine_id());
    copy->set_asynchronous(true);
    copy->set_source_location(producer.source_location());
    plan::InputDesc* copy_in = copy->add_inputs();
    copy_in->set_producer_task_id(new_id[producer.id()]);
    copy_in->set_producer_register(in.producer_register());
    copy_in->set_blob_index(in.blob_index());
    plan::RegisterDesc* out = copy->add_registers();
    out->set_name("out");
    out->set_register_num(std::max(2, from_register->register_num()));
    *out->add_blobs() = from_register->blobs(in.blob_index());
    out->mutable_memory_case()->set_kind(to_device ? plan::MEMORY_DEVICE : plan::MEMORY_PINNED_HOST);
    out->mutable_memory_case()->set_device_id(to_device ? destination : 0);
    copies.emplace(key, copy->id());
    return copy->id();
  };

  for (const plan::Task& task : plan.tasks()) {
    const int needed = place_of(task);
    // Copies first (they must precede the reader), then the task with its inputs renumbered.
    std::vector<plan::InputDesc> inputs(task.inputs().begin(), task.inputs().end());
    for (plan::InputDesc& in : inputs) {
      const plan::Task& producer = plan.tasks(static_cast<int>(in.producer_task_id()));
      if (in.control() || place_of_register(producer, in.producer_register()) == needed) {
        in.set_producer_task_id(new_id[producer.id()]);
        continue;
      }
      if (producer.registers(in.producer_register()).blobs_size() == 0) {
        in.set_producer_task_id(new_id[producer.id()]);
        continue;
      }
      const int from = place_of_register(producer, in.producer_register());
      if (from != kHost && needed != kHost)
        return InvalidArgument(Where(task) + " on gpu:" + std::to_string(needed) + " reads '" + producer.name() +
                               "' on gpu:" + std::to_string(from) +
                               ": blobs do not move between GPUs yet; place both ops on one GPU");
      in.set_producer_task_id(copy_of(producer, in, needed));
      in.set_producer_register(0);
      in.set_blob_index(0);
    }
    plan::Task* added = placed.add_tasks();
    *added = task;
    added->set_id(placed.tasks_size() - 1);
    new_id[task.id()] = added->id();
    added->clear_inputs();
    for (plan::InputDesc& in : inputs) *added->add_inputs() = std::move(in);
    if (OnGpu(*added)) {
      added->set_asynchronous(true);
      for (plan::RegisterDesc& r : *added->mutable_registers()) {
        if (r.blobs_size() == 0) continue;  // a control register holds no memory
        r.mutable_memory_case()->set_kind(plan::MEMORY_DEVICE);
        r.mutable_memory_case()->set_device_id(added->device_id());
      }
    }
  }
  // Consumers, deduplicated per task (the runtime makes one in-edge per producer register).
  for (plan::Task& t : *placed.mutable_tasks())
    for (plan::RegisterDesc& r : *t.mutable_registers()) r.clear_consumer_task_ids();
  for (const plan::Task& t : placed.tasks()) {
    std::set<std::pair<int64_t, int>> seen;
    for (const plan::InputDesc& in : t.inputs())
      if (seen.insert({in.producer_task_id(), in.producer_register()}).second)
        placed.mutable_tasks(static_cast<int>(in.producer_task_id()))
            ->mutable_registers(in.producer_register())
            ->add_consumer_task_ids(t.id());
  }
  plan = std::move(placed);
  return Status::Ok();
}

void MarkStreamOrderedTasks(plan::Plan& plan) {
  auto compute_on_stream = [&](const plan::Task& task) {
    return OnGpu(task) && task.asynchronous() && task.op_type() != kCopyHostToDevice && task.op_type() != kCopyDeviceToHost;
  };
  auto same_stream = [](const plan::Task& a, const plan::Task& b) {
    return a.machine_id() == b.machine_id() && a.device_id() == b.device_id();
  };
  for (plan::Task& task : *plan.mutable_tasks()) {
    task.set_stream_ordered(false);
    if (!compute_on_stream(task) || task.mutable_inputs_size() > 0) continue;
    bool ordered = true;
    for (const plan::InputDesc& in : task.inputs()) {
      if (in.control()) continue;  // ordering only: no bytes this act reads
      const plan::Task& producer = plan.tasks(static_cast<int>(in.producer_task_id()));
      if (compute_on_stream(producer) && same_stream(producer, task)) continue;
      const plan::MemoryCase& memory = producer.registers(in.producer_register()).memory_case();
      ordered &= producer.kind() == plan::VARIABLE && memory.kind() == plan::MEMORY_DEVICE &&
                 memory.device_id() == task.device_id() && producer.machine_id() == task.machine_id();
    }
    for (const plan::RegisterDesc& r : task.registers())
      for (int64_t consumer : r.consumer_task_ids()) {
        const plan::Task& reader = plan.tasks(static_cast<int>(consumer));
        ordered &= compute_on_stream(reader) && same_stream(reader, task);
      }
    task.set_stream_ordered(ordered);
  }
}

}  // namespace graph
}  // namespace actorflow
