// DataPlane: the bytes of cross-machine edges (docs/cluster.md, "Data plane").
//
// The compiler turns every edge whose producer and consumer live on different machines into a
// SEND task on the producer's machine and a RECV task on the consumer's (graph/passes.h,
// InsertCrossMachineTransfers). Both are asynchronous acts (actors/kernel.h):
//  - a RECV act posts its free output register for its iteration; it completes when the bytes
//    of that iteration are in the register. It launches only into a free register, so a
//    receiver never takes more than its registers hold;
//  - a SEND act copies its input register's bytes into a message and completes when the
//    receiver acknowledged them in a RECV register. So at most register_num iterations per
//    edge are on the wire or waiting for a register: memory stays bounded by the plan and
//    backpressure crosses machines.
// Bytes that arrive before their RECV act posted a register wait in the receiving endpoint
// (bounded as above). Iterations pair up by number: every rank must push the same iterations
// of a job in the same order (the SPMD program does).
//
// Transport: one TCP connection per pair of ranks (ports exchanged through the control plane),
// a writer thread sending payloads straight from SEND registers and a reader thread reading
// them straight into posted RECV registers. docs/cluster.md says why this and not Gloo's pairs
// or CAF messages, and what it costs.
//
// Authentication: every connection opens with a proof of the cluster secret both ways
// (comm/data_plane_handshake.h); with frame authentication on (ClusterOptions::
// authenticate_data_frames, on with TLS) every frame also carries tags under keys fresh per
// connection and direction (comm/data_plane_frames.h): a frame altered, replayed, reordered or
// cut short on the way fails the data plane with an error naming the rank it came from.
//
// Failure: when the control plane loses a rank (Cluster::OnFailure), every pending act fails
// with its message ("lost rank 1 (...)"), and every later act fails at once: iterations end
// with that error, nothing waits forever.
//
// Thread-safety: Create and MakeKernel from one thread at a time; the kernels follow the
// runtime's contract (one act at a time per task); the endpoint and failure paths lock.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "actors/environment.h"
#include "actors/kernel.h"
#include "actors/status.h"
#include "comm/cluster.h"
#include "comm/data_plane_frames.h"

namespace actorflow {
namespace plan { class Task; }

namespace data_plane_internal {
class DataPlaneCore;  // the endpoint's and kernels' shared state (comm/data_plane_core.h)
}

// The op type of the data plane's all-reduce tasks.
inline constexpr const char* kAllReduceOp = "all_reduce";

class DataPlane {
 public:
  // A collective call after Rendezvous: spawns this rank's endpoint and learns every other
  // rank's (Cluster::AllGather, bounded by `timeout`).
  static StatusOr<std::shared_ptr<DataPlane>> Create(Cluster& cluster, std::shared_ptr<ActorEnvironment> environment,
                                                     std::chrono::milliseconds timeout);
  // A connection already opened and authenticated (Create's handshake does both).
  struct PeerConnection {
    int peer = -1;
    int fd = -1;      // owned by the data plane from Start on
    FrameKeys keys;   // enabled: frames carry tags under these keys
  };
  // The data plane of `rank` over `connections`: what Create ends with; tests give it socket
  // pairs. Without a cluster only a connection's end or a forged frame fails it.
  static std::shared_ptr<DataPlane> Start(int rank, std::vector<PeerConnection> connections);
  // Whether `options` ask for frame authentication (see ClusterOptions::authenticate_data_frames).
  static bool AuthenticatesFrames(const ClusterOptions& options);
  ~DataPlane();
  DataPlane(const DataPlane&) = delete;
  DataPlane& operator=(const DataPlane&) = delete;

  // Whether the op type is one of the data plane's ("send", "recv", "all_reduce").
  static bool Handles(const std::string& op_type);
  // The kernel of a SEND, RECV or ALL_REDUCE task of job `job` (each job has its own channels;
  // the name must be the same on every rank). InvalidArgument naming the task for a malformed one.
  //
  // ALL_REDUCE (asynchronous): attrs `channel` (its own numbering) and `ring` (the ranks taking
  // part, in ring order, the same list on each of them); one or more data inputs of the sum's
  // byte size (this machine's partial sums) and one register with one float32/float64 blob.
  // An act sums its inputs into its output register, then runs the ring all-reduce
  // (comm/ring.h) with the other ranks' acts of the same iteration, sending from and
  // receiving into that register; it completes when the register holds the total. Each rank
  // sends and receives 2 (N - 1) / N of the bytes. Acts of different tasks and iterations may
  // launch in any order on different ranks.
  StatusOr<KernelFn> MakeKernel(const std::string& job, const plan::Task& task);

  int rank() const;
  // Payloads received before their RECV act posted a register, over all channels now (each
  // channel holds at most its sender's register_num: the bound tests check).
  size_t waiting_payloads() const;
  // Payload bytes this rank sent and received so far (data and all-reduce frames, all peers):
  // what the benchmarks report as traffic per rank.
  std::pair<uint64_t, uint64_t> PayloadBytes() const;
  // Of the payload bytes received, those that came before their RECV act posted its register
  // (send/recv) or before their all-reduce act launched, and were copied into the register (or
  // added from a buffer) afterwards; the rest went straight into the register.
  uint64_t CopiedPayloadBytes() const;
  // Data and ack frames written (whole, or their start) by the thread that sent them, while the
  // connection's writer thread was idle, instead of being handed to it.
  uint64_t DirectWrites() const;

 private:
  DataPlane() = default;
  StatusOr<KernelFn> MakeAllReduceKernel(const std::string& job, const plan::Task& task);
  std::shared_ptr<data_plane_internal::DataPlaneCore> core_;
};

}  // namespace actorflow
