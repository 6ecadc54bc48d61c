// The CUDA device's registration (actors/cuda_device.cc, built when CUDA is enabled). The global
// registries call these themselves in a CUDA build: DeviceRegistry::Global() has "cuda" and
// AllocatorRegistry::Global() has caching device and pinned host allocators, whether or not a
// GPU is present (without one, a stream or an allocation fails with the CUDA error).
#pragma once

namespace actorflow {

class DeviceRegistry;
class AllocatorRegistry;

void RegisterCudaDevice(DeviceRegistry& devices);
void RegisterCudaAllocators(AllocatorRegistry& allocators);

// Whether this build has CUDA support.
bool BuiltWithCuda();

}  // namespace actorflow
