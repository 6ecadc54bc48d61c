// GPU placement in the compiler: whether the configured GPUs exist, and the plan pass that puts
// the tasks of ops placed on "gpu" on CUDA devices.
#pragma once

#include "actors/proto/plan.pb.h"
#include "actors/status.h"

namespace actorflow {
namespace graph {

// OK when this build has CUDA and at least `gpu_device_num` GPUs are present; otherwise
// FailedPrecondition naming gpu_device_num(n), the device count found and why (no CUDA in this
// build, the driver's error), and cpu_device_num(n) as the CPU equivalent.
Status CheckGpuDevices(int gpu_device_num);

// The op types of the copy tasks PlaceOnDevices inserts (kernels/device_copy.cc).
inline constexpr const char kCopyHostToDevice[] = "copy_h2d";
inline constexpr const char kCopyDeviceToHost[] = "copy_d2h";

// Runs on the lowered plan (CompileGraph calls it before the in-place check). COMPUTE tasks that
// lowering put on "gpu" (ops placed there) become CUDA tasks:
//  - each must have a kernel of device type "cuda" in the op registry, else InvalidArgument
//    naming the op, its type and the user's line;
//  - a variable read (by data edges) only by ops of one GPU lives on it: its register is device
//    memory of that GPU (the session binds a device buffer holding its value) and its updates run
//    there; other variables stay in host memory and an op writing a host register in place (an
//    update of such a variable) runs on the CPU, so nothing writes host memory from the device;
//  - they act asynchronously (plan Task.asynchronous) and their registers are device memory of
//    their GPU;
//  - where a blob crosses between host and GPU, a copy task (copy_h2d / copy_d2h, on that GPU,
//    asynchronous) is inserted once per (register blob, destination) and the readers read it.
//    Host registers a host-to-device copy reads (feeds, CPU ops) and those a device-to-host copy
//    writes are pinned host memory, so the copies are DMA transfers; variables stay pageable.
// Tasks are renumbered (copies come right before their first reader), so ids stay topological.
// A plan without GPU tasks is returned unchanged.
Status PlaceOnDevices(plan::Plan& plan);

// Marks the GPU compute tasks whose acts may end once their work is enqueued (plan
// Task.stream_ordered): not copies (they use the copy stream), no in-place writes (the host
// reads variables between calls), data inputs only from compute tasks on the same GPU and
// machine or from variables in that GPU's memory, and every consumer of every register such a
// compute task. A chain of them then costs one launch per op instead of one round trip to the
// device per op. Runs on the final plan (after the send/recv pass, whose tasks are consumers).
void MarkStreamOrderedTasks(plan::Plan& plan);

}  // namespace graph
}  // namespace actorflow
