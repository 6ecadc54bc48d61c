// The data plane's shared state (comm/data_plane.h): frames, channels, the per-peer connections
// with their reader and writer threads, and the core every kernel and thread of one DataPlane
// shares. Internal to comm/: data_plane.cc (connections, send/recv) and
// data_plane_all_reduce.cc (the ring all-reduce) implement it.
#pragma once

#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "actors/kernel.h"
#include "actors/status.h"
#include "comm/data_plane_frames.h"
#include "comm/ring.h"

namespace actorflow {
namespace data_plane_internal {

using ChannelKey = std::pair<uint64_t, int64_t>;  // (job digest, channel)

// One frame on a data connection: a header, then `bytes` payload bytes (data) or `bytes` bytes
// of error text (ack; 0 = received fine). Both ends are this host's byte order (loopback).
struct Header {
  uint64_t job = 0;
  int64_t channel = 0;
  int64_t iteration = 0;
  uint32_t kind = 0;  // kData, kAck or kCollective
  uint32_t from = 0;  // the sender's rank
  uint64_t bytes = 0;
  uint64_t step = 0;  // kCollective: the all-reduce's step (comm/ring.h)
};
constexpr uint32_t kData = 1, kAck = 2, kCollective = 3;

struct Posted {
  char* destination = nullptr;
  KernelCompletion done;
};

struct RecvChannel {
  std::string task;    // for messages
  int64_t bytes = -1;  // -1 until the local RECV task registered (data may come first)
  std::map<int64_t, Posted> posted;              // iteration -> the register waiting for it
  std::map<int64_t, std::vector<char>> arrived;  // iteration -> bytes waiting for a register
  // Buffers of earlier early arrivals, reused so that a transfer that comes before its RECV act
  // allocates (and faults in) nothing after the first iterations; at most kSpareBuffers kept.
  std::vector<std::vector<char>> spare;
};

constexpr size_t kSpareBuffers = 4;

struct SendChannel {
  std::string task;
  std::map<int64_t, KernelCompletion> pending;  // iteration -> waiting for the receiver's ack
};

// One launched act of an all-reduce task: its output register holds the sum being built; chunks
// are sent from it and received (added or copied) into it.
struct CollectiveAct {
  char* sum = nullptr;
  // The rank's own values: the single data input's register (never copied into `sum`: step 0
  // sends from it and reduce steps write sum = input + received, comm/ring.h), or `sum` itself
  // after the local sum of several inputs.
  const char* input = nullptr;
  int received = 0;  // steps whose chunk is in `sum`
  int busy = 0;      // chunks being read or applied into `sum`, frames queued or being written from it
  std::string error;  // set when the act failed: it completes once nothing is busy
  KernelCompletion done;
};

struct CollectiveChannel {
  std::string task;
  std::unique_ptr<RingSchedule> schedule;  // null until the local task registered (bytes may come first)
  DType dtype = DType::kFloat32;
  int next = -1, previous = -1;  // ranks
  std::map<int64_t, CollectiveAct> acts;  // iteration -> act in flight
  // (iteration, step) -> a chunk that came before its act launched (bounded: the previous rank
  // sends step t + 1 only after it received step t, and launches at most register_num acts).
  std::map<std::pair<int64_t, int64_t>, std::vector<char>> early;
  // Buffers of earlier early chunks, reused (at most kSpareChunks kept), so that a chunk that
  // comes before its act allocates and faults in nothing after the first iterations.
  std::vector<std::vector<char>> spare;
};

constexpr size_t kSpareChunks = 2;

inline bool WriteAll(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t wrote = send(fd, p, n, MSG_NOSIGNAL);
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote <= 0) return false;
    p += wrote;
    n -= static_cast<size_t>(wrote);
  }
  return true;
}

inline bool ReadAll(int fd, void* data, size_t n) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    ssize_t got = recv(fd, p, n, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    p += got;
    n -= static_cast<size_t>(got);
  }
  return true;
}

// One TCP connection to a peer rank: a writer thread sends queued frames in order (payloads
// straight from the SEND's register, which stays held until the ack), a reader thread reads
// frames (payloads straight into a posted RECV register when one waits). Acks go through the
// writer too, so a reader never blocks on a write (two readers blocked writing to each other
// would deadlock).
struct Connection {
  int peer = -1;
  int fd = -1;
  std::mutex mu;
  std::condition_variable cv;
  struct Frame {
    Header header;
    const char* payload = nullptr;  // data: the register; ack: error text below
    std::string error;
    // Begun by the thread that sent it (DataPlaneCore::Send: counted, a data frame marked as
    // being written) with `sent` bytes of it (header, then payload) written: the writer writes
    // the rest, without the checks of a new frame.
    bool begun = false;
    size_t sent = 0;
  };
  std::deque<Frame> queue;
  bool closing = false;
  // Some thread writes to the socket: the writer thread, or a thread writing its own frame
  // directly while the writer is idle (DataPlaneCore::Send). One at a time keeps frames whole
  // and in order.
  bool socket_busy = false;
  std::thread reader, writer;
  // The data frame being written (under DataPlaneCore::mu): its send is completed by the
  // writer once the write ended, never while the write may still read the register.
  // Payload bytes of data and all-reduce frames, written and read (DataPlane::PayloadBytes).
  std::atomic<uint64_t> payload_sent{0}, payload_received{0};
  bool writing = false;
  std::pair<uint64_t, int64_t> writing_key;
  int64_t writing_iteration = 0;
  // The peer acknowledged the frame being written before the write returned (it read the last
  // bytes while the write call was still under way): EndDataWrite completes the send with the
  // ack's outcome (`writing_ack_error` empty: received), so the register is released only
  // after the write stopped reading it.
  bool writing_acked = false;
  std::string writing_ack_error;
  // Frame authentication (comm/data_plane_frames.h), null when off: the writer's tags and the
  // reader's checks. read_error: why the reader stopped (a closed connection, a forged frame).
  std::unique_ptr<FrameAuthenticator> send_auth, receive_auth;
  std::string read_error;
  bool read_closed = false;  // the reader stopped because the connection closed (no forged frame)
};

class DataPlaneCore {
 public:
  std::mutex mu;
  std::string failure;  // the control plane's or a connection's, once a rank is lost
  bool closing = false;  // the data plane is being destroyed: a closed connection is expected
  int rank = 0;
  std::map<int, std::unique_ptr<Connection>> connections;  // by peer rank; fixed after Create
  std::map<ChannelKey, RecvChannel> recvs;
  std::map<ChannelKey, SendChannel> sends;
  std::map<ChannelKey, CollectiveChannel> collectives;  // channels never go away: references stay valid

  // Fails every pending act and remembers why, so that later acts fail at once.
  void Fail(const std::string& message) {
    std::vector<std::pair<KernelCompletion, std::string>> failed;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!failure.empty() || closing) return;
      failure = message;
      for (auto& [key, channel] : recvs) {
        for (auto& [iteration, posted] : channel.posted) failed.emplace_back(std::move(posted.done), channel.task);
        channel.posted.clear();
        channel.arrived.clear();
      }
      for (auto& [key, channel] : sends) {
        for (auto it = channel.pending.begin(); it != channel.pending.end();) {
          if (BeingWritten(key, it->first)) {  // its writer completes it when the write ends
            ++it;
            continue;
          }
          failed.emplace_back(std::move(it->second), channel.task);
          it = channel.pending.erase(it);
        }
      }
      for (auto& [key, channel] : collectives) {
        for (auto it = channel.acts.begin(); it != channel.acts.end();) {
          if (it->second.error.empty()) it->second.error = message;
          if (it->second.busy > 0) {  // whoever holds it completes it when done with its sum
            ++it;
            continue;
          }
          failed.emplace_back(std::move(it->second.done), channel.task);
          it = channel.acts.erase(it);
        }
        channel.early.clear();
      }
      // Unblocks readers and writers (a frozen peer never reads nor writes again).
      for (auto& [peer, connection] : connections) shutdown(connection->fd, SHUT_RDWR);
    }
    failure_told.notify_all();
    for (auto& [done, task] : failed) (void)done.Complete(FailedPrecondition(message).WithContext(task));
  }

  bool BeingWritten(const std::pair<uint64_t, int64_t>& key, int64_t iteration) const {  // mu held
    for (const auto& [peer, connection] : connections)
      if (connection->writing && connection->writing_key == key && connection->writing_iteration == iteration)
        return true;
    return false;
  }

  // The writer's data frame: written unless the data plane failed; if it failed before or
  // during the write, the send is completed with the failure here. A frame begun by its
  // sender's thread is marked as being written already: its rest is written.
  bool WriteData(Connection* connection, const Connection::Frame& frame) {
    const std::pair<uint64_t, int64_t> key{frame.header.job, frame.header.channel};
    if (!frame.begun) {
      std::lock_guard<std::mutex> lock(mu);
      if (failure.empty()) {
        connection->writing = true;
        connection->writing_key = key;
        connection->writing_iteration = frame.header.iteration;
      }
    }
    bool written = connection->writing && (!frame.begun ? WriteFrame(connection, frame.header, frame.payload)
                                                        : WriteRest(connection, frame, 0));
    return EndDataWrite(connection, frame, written);
  }

  // After a data frame's write (whole, or the rest of it): the send is completed with the
  // failure when the data plane failed meanwhile. Returns written || failed.
  bool EndDataWrite(Connection* connection, const Connection::Frame& frame, bool written) {
    const std::pair<uint64_t, int64_t> key{frame.header.job, frame.header.channel};
    KernelCompletion done;
    std::string task, why, ack_error;
    {
      std::lock_guard<std::mutex> lock(mu);
      connection->writing = false;
      const bool acked = connection->writing_acked;
      connection->writing_acked = false;
      if (acked || !failure.empty()) {
        auto channel = sends.find(key);
        if (channel != sends.end()) {
          auto it = channel->second.pending.find(frame.header.iteration);
          if (it != channel->second.pending.end()) {
            done = std::move(it->second);
            channel->second.pending.erase(it);
            task = channel->second.task;
            if (acked) ack_error = std::move(connection->writing_ack_error);
            else why = failure;
          }
        }
      }
    }
    if (done.valid())
      (void)done.Complete(!why.empty() ? FailedPrecondition(why).WithContext(task)
                                       : ack_error.empty() ? Status::Ok() : Internal(ack_error).WithContext(task));
    return written || !why.empty();
  }

  Status Failed(const std::string& task) {  // mu held
    return FailedPrecondition(failure).WithContext(task);
  }

  void Enqueue(int peer, Connection::Frame frame) {
    Connection& connection = *connections.at(peer);
    {
      std::lock_guard<std::mutex> lock(connection.mu);
      connection.queue.push_back(std::move(frame));
    }
    connection.cv.notify_one();
  }

  // A data or ack frame (not with mu held): when the connection's writer is idle with nothing
  // queued (and frames are not authenticated), this thread writes what the socket takes at once
  // (non-blocking) and queues only the rest for the writer: no hand-off to the writer thread on
  // the transfer's path when the socket has room (a wake-up per transfer saved, each one a
  // scheduler latency on loaded cores). Otherwise the frame is queued for the writer.
  void Send(int peer, Connection::Frame frame);

  void Ack(int peer, uint64_t job, int64_t channel, int64_t iteration, std::string error) {
    Connection::Frame frame;
    frame.header = Header{job, channel, iteration, kAck, static_cast<uint32_t>(rank), error.size()};
    frame.error = std::move(error);
    Send(peer, std::move(frame));
  }

  // Frames written whole or in part by the thread that sent them (DataPlane::DirectWrites).
  std::atomic<uint64_t> direct_writes{0};

  void Writer(Connection* connection) {
    for (;;) {
      Connection::Frame frame;
      {
        std::unique_lock<std::mutex> lock(connection->mu);
        // A frame to write once no sender's thread writes its own; or the end.
        connection->cv.wait(lock, [&] {
          return connection->queue.empty() ? connection->closing : !connection->socket_busy;
        });
        if (connection->queue.empty()) return;  // closing
        frame = std::move(connection->queue.front());
        connection->queue.pop_front();
        connection->socket_busy = true;
      }
      bool written;
      if (frame.header.kind != kAck && !frame.begun)
        connection->payload_sent.fetch_add(frame.header.bytes, std::memory_order_relaxed);
      if (frame.header.kind == kData) {
        written = WriteData(connection, frame);
      } else if (frame.header.kind == kCollective) {
        written = WriteCollective(connection, frame);
      } else {
        written = !frame.begun ? WriteFrame(connection, frame.header, frame.error.data())
                               : WriteRest(connection, frame, 0);
      }
      const int write_error = errno;
      {
        std::lock_guard<std::mutex> lock(connection->mu);
        connection->socket_busy = false;
      }
      if (!written) {
        Lost(connection->peer, "writing to its data connection: " + std::string(std::strerror(write_error)));
        // Keep draining the queue: queued sends are completed (failed) by WriteData.
      }
    }
  }

  void Reader(Connection* connection) {
    std::vector<char> error_text;
    std::vector<char> scratch(kReducePiece);  // the all-reduce adds what it reads piece by piece
    for (;;) {
      Header header;
      if (!ReadHeader(connection, &header)) return ReadFailed(connection);
      if (header.kind != kAck) connection->payload_received.fetch_add(header.bytes, std::memory_order_relaxed);
      if (header.kind == kCollective) {
        if (!ReceiveCollective(connection, header, scratch)) return ReadFailed(connection);
        continue;
      }
      if (header.kind == kAck) {
        error_text.resize(header.bytes);
        if (!ReadPayload(connection, error_text.data(), header.bytes) || !EndPayload(connection, header))
          return ReadFailed(connection);
        KernelCompletion done;
        std::string task;
        {
          std::lock_guard<std::mutex> lock(mu);
          auto channel = sends.find({header.job, header.channel});
          if (channel == sends.end()) continue;
          auto it = channel->second.pending.find(header.iteration);
          if (it == channel->second.pending.end()) continue;  // failed already
          if (connection->writing && connection->writing_key == std::make_pair(header.job, header.channel) &&
              connection->writing_iteration == header.iteration) {
            connection->writing_acked = true;  // the write returns soon: it completes the send
            connection->writing_ack_error.assign(error_text.begin(), error_text.end());
            continue;
          }
          done = std::move(it->second);
          channel->second.pending.erase(it);
          task = channel->second.task;
        }
        (void)done.Complete(header.bytes == 0 ? Status::Ok()
                                              : Internal(std::string(error_text.begin(), error_text.end())).WithContext(task));
        continue;
      }
      // Data: straight into the posted register when one waits, else into a buffer that
      // waits for the RECV act (at most the sender's register_num per channel).
      Posted posted;
      // Under mu: takes this frame's register when its RECV act posted one of the frame's size.
      auto take_posted = [&](RecvChannel& channel) {
        auto it = channel.posted.find(header.iteration);
        if (it == channel.posted.end() || static_cast<int64_t>(header.bytes) != channel.bytes) return false;
        posted = std::move(it->second);
        channel.posted.erase(it);
        return true;
      };
      bool have_register = false;
      std::string task;
      int64_t expected = 0;
      std::vector<char> early;  // a spare buffer, when the bytes must wait for their RECV act
      {
        std::lock_guard<std::mutex> lock(mu);
        RecvChannel& channel = recvs[{header.job, header.channel}];
        have_register = take_posted(channel);
        task = channel.task;
        expected = channel.bytes;
        if (!have_register && !channel.spare.empty()) {
          early = std::move(channel.spare.back());
          channel.spare.pop_back();
        }
      }
      if (have_register) {
        if (!ReadPayload(connection, posted.destination, header.bytes) || !EndPayload(connection, header)) {
          (void)posted.done.Complete(FailedPrecondition(connection->read_error).WithContext(task));
          return ReadFailed(connection);
        }
        (void)posted.done.Complete(Status::Ok());
        Ack(connection->peer, header.job, header.channel, header.iteration, "");
        continue;
      }
      std::vector<char> bytes = std::move(early);
      bytes.resize(header.bytes);  // a spare of the same size: nothing to fill
      // Read in pieces; between them, look whether the RECV act posted its register meanwhile
      // (the usual race: the bytes come as the receiving rank starts its call). Then only what
      // came so far is copied, and the rest is read straight into the register.
      size_t done = 0;
      bool posted_meanwhile = false;
      while (done < header.bytes) {
        const size_t piece = std::min<size_t>(header.bytes - done, kEarlyPiece);
        if (!ReadPayload(connection, bytes.data() + done, piece)) return ReadFailed(connection);
        done += piece;
        if (done == header.bytes) break;
        std::lock_guard<std::mutex> lock(mu);
        RecvChannel& channel = recvs[{header.job, header.channel}];
        if (take_posted(channel)) {
          task = channel.task;
          posted_meanwhile = true;
          break;
        }
      }
      if (posted_meanwhile) {
        std::memcpy(posted.destination, bytes.data(), done);
        copied_bytes.fetch_add(done, std::memory_order_relaxed);
        if (!ReadPayload(connection, posted.destination + done, header.bytes - done) || !EndPayload(connection, header)) {
          (void)posted.done.Complete(FailedPrecondition(connection->read_error).WithContext(task));
          return ReadFailed(connection);
        }
        (void)posted.done.Complete(Status::Ok());
        Ack(connection->peer, header.job, header.channel, header.iteration, "");
        KeepSpare(header, std::move(bytes));
        continue;
      }
      if (!EndPayload(connection, header)) return ReadFailed(connection);
      std::string error;
      {
        std::lock_guard<std::mutex> lock(mu);
        RecvChannel& channel = recvs[{header.job, header.channel}];
        auto it = channel.posted.find(header.iteration);
        if (it == channel.posted.end()) {  // the RECV act comes later: it copies the bytes
          channel.arrived.emplace(header.iteration, std::move(bytes));
          continue;
        }
        posted = std::move(it->second);  // posted during the last piece
        channel.posted.erase(it);
        expected = channel.bytes;
        task = channel.task;
      }
      if (static_cast<int64_t>(bytes.size()) != expected) {
        error = task + ": expected " + std::to_string(expected) + " bytes from rank " + std::to_string(connection->peer) +
                ", got " + std::to_string(bytes.size()) + " (do all ranks run the same plan?)";
        (void)posted.done.Complete(Internal(error));
      } else {
        if (!bytes.empty()) std::memcpy(posted.destination, bytes.data(), bytes.size());
        copied_bytes.fetch_add(bytes.size(), std::memory_order_relaxed);
        (void)posted.done.Complete(Status::Ok());
      }
      Ack(connection->peer, header.job, header.channel, header.iteration, error);
      KeepSpare(header, std::move(bytes));
    }
  }

  // An early-arrival buffer done with: kept for the channel's next early arrival (bounded).
  void KeepSpare(const Header& header, std::vector<char> bytes) {
    std::lock_guard<std::mutex> lock(mu);
    RecvChannel& channel = recvs[{header.job, header.channel}];
    if (channel.spare.size() < kSpareBuffers) channel.spare.push_back(std::move(bytes));
  }

  // Early bytes are read in pieces of this size, looking for their register between pieces.
  static constexpr size_t kEarlyPiece = 256 * 1024;
  // Payload bytes received before their register was posted, then copied into it (the part of
  // a transfer that costs a copy more than reading straight into the register).
  std::atomic<uint64_t> copied_bytes{0};

  // ---- The ring all-reduce (comm/ring.h). An act advances as its chunks arrive, on the reader
  // thread of the previous rank's connection: each chunk is added (or copied) into the act's
  // sum and queued on to the next rank. Nothing waits for a particular act, so ranks may launch
  // their all-reduces in any order without deadlock. A chunk that comes before its act launched
  // waits in `early` and is applied by the launch.

  static constexpr int64_t kReducePiece = 64 * 1024;  // a multiple of every element size

  struct Ended {
    KernelCompletion done;
    Status status;
  };

  // mu held. Queues the frame of `step`: its chunk, straight from the act's sum (busy until written).
  void QueueStep(const ChannelKey& key, CollectiveChannel& channel, int64_t iteration, CollectiveAct& act, int step);

  // mu held. One use of the act ended; when the act is over (every step in its sum, or failed,
  // and nothing uses it any more) it is removed and its completion returned.
  std::optional<Ended> Release(CollectiveChannel& channel, int64_t iteration);

  // mu held. Why a chunk cannot belong to this act ("" when it can).
  std::string Mismatch(const CollectiveChannel& channel, uint64_t step, uint64_t bytes, int from) const;

  // Applies the chunk of `step` into the act's sum: its first `from_source` bytes from `source`
  // (bytes that came before the act launched), the rest read from `connection` (the frame of
  // `header`; null when source holds the whole chunk); then queues the next step. Called
  // without mu, with the act busy on the caller's behalf (released here). False when reading
  // failed.
  bool ApplyStep(const ChannelKey& key, CollectiveChannel& channel, int64_t iteration, CollectiveAct& act, int step,
                 const char* source, int64_t from_source, Connection* connection, const Header* header,
                 std::vector<char>& scratch);

  // mu held. An early chunk's buffer done with: kept for the channel's next early chunk (bounded).
  void KeepSpareChunk(CollectiveChannel& channel, std::vector<char> buffer) {
    if (channel.spare.size() < kSpareChunks) channel.spare.push_back(std::move(buffer));
  }

  // The reader's collective frame: into its act when it launched, else kept for the launch.
  bool ReceiveCollective(Connection* connection, const Header& header, std::vector<char>& scratch);

  // The writer's collective frame: written unless the data plane failed; then the act's use ends.
  bool WriteCollective(Connection* connection, const Connection::Frame& frame);


  // ---- Frames on the wire: header, then payload; with authentication on, a tag after each
  // (comm/data_plane_frames.h). Implemented in data_plane.cc.
  // The writer thread's: false when the connection broke.
  bool WriteFrame(Connection* connection, const Header& header, const char* payload);
  // An unauthenticated frame's bytes from frame.sent on (header, then payload; an ack's payload
  // is its error text). flags 0: blocks until all are written; MSG_DONTWAIT: what the socket
  // takes now. Returns the bytes of the frame written in all (frame.sent included), or -1 when
  // the connection broke; WriteRest(connection, frame, 0) is true when the frame is whole.
  int64_t WriteFrom(Connection* connection, const Connection::Frame& frame, int flags);
  bool WriteRest(Connection* connection, const Connection::Frame& frame, int flags) {
    return WriteFrom(connection, frame, flags) == static_cast<int64_t>(sizeof(Header) + frame.header.bytes);
  }
  // The reader thread's: the next header (its tag checked), then its payload in one or more
  // pieces (ReadPayload), then EndPayload (the payload's tag, checked). False when the
  // connection closed or a tag failed, with the reason in connection->read_error.
  bool ReadHeader(Connection* connection, Header* header);
  bool ReadPayload(Connection* connection, char* destination, size_t bytes);
  bool EndPayload(Connection* connection, const Header& header);
  // The reader stopped: fails the data plane with connection->read_error. A connection that
  // merely closed, with a control plane attached, is usually the echo of a failure the control
  // plane tells every rank (a missed call deadline, a lost rank): the peer that learnt it first
  // shut its connections. So the reader waits for that failure, with its cause, a little while
  // (kControlPlaneGrace) before failing with the closed connection. A forged frame fails at once.
  void ReadFailed(Connection* connection) {
    if (connection->read_closed && control_plane) {
      std::unique_lock<std::mutex> lock(mu);
      failure_told.wait_for(lock, kControlPlaneGrace, [&] { return !failure.empty() || closing; });
      if (!failure.empty() || closing) return;
    }
    Fail(connection->read_error);
  }
  static constexpr std::chrono::milliseconds kControlPlaneGrace{2000};
  bool control_plane = false;  // set by DataPlane::Create: Cluster::OnFailure fails this plane
  std::condition_variable failure_told;  // notified when `failure` is set

  void Lost(int peer, const std::string& why) {
    Fail("lost rank " + std::to_string(peer) + " (" + why + ")");
  }
};

}  // namespace data_plane_internal
}  // namespace actorflow
