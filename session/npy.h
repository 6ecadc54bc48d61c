// NumPy .npy files (format versions 1.0, 2.0 and 3.0), strictly: the model directory's weights
// and actorflow-run's inputs and outputs. Only what actorflow tensors are: C order, native
// little-endian float32, float64, int8, int32, int64 or uint8. Anything else, and any damage
// (a bad magic string or header, a header dictionary with other keys, a data size that is not
// what the shape says), is an InvalidArgument naming `what` (the file), never a crash and
// never an allocation larger than the data the file holds.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "actors/status.h"
#include "actors/tensor.h"

namespace actorflow {

// An owning tensor in host memory, 64-byte aligned.
struct HostTensor {
  TensorDesc desc;
  std::shared_ptr<void> data;
  TensorView view() const { return TensorView{data.get(), desc}; }
};

// A zero-filled aligned buffer for `desc`; InvalidArgument for an invalid desc or one larger
// than `max_bytes`, Internal when the allocation fails.
StatusOr<HostTensor> AllocateHostTensor(const TensorDesc& desc, const std::string& what,
                                        uint64_t max_bytes = uint64_t{1} << 40);

// The bytes of a .npy file (version 1.0 header, padded to 64 bytes) holding `tensor`.
std::string EncodeNpy(const TensorView& tensor);
// Parses .npy bytes; `what` names the source in errors ("input file 'x.npy'").
StatusOr<HostTensor> DecodeNpy(const std::string& bytes, const std::string& what);

// Whole-file helpers. WriteFileDurably writes and fsyncs `bytes`. With replace = false it
// creates `path` only if nothing is there (O_EXCL: it never replaces a file); with replace =
// true it writes a temporary sibling and renames it over `path`, so `path` holds the old or
// the new content, never a part.
StatusOr<std::string> ReadFile(const std::string& path, uint64_t max_bytes = uint64_t{1} << 40);
Status WriteFileDurably(const std::string& path, const std::string& bytes, bool replace = false);
StatusOr<HostTensor> ReadNpyFile(const std::string& path);

// CRC-32 (IEEE 802.3, zlib's crc32) of `bytes`: the manifest's check on each file.
uint32_t Crc32(const std::string& bytes);

}  // namespace actorflow
