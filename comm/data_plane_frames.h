// Per-frame authentication of the data plane (docs/cluster.md, "What is authenticated").
//
// After the handshake (comm/data_plane_handshake.h) both ends of a connection hold two fresh
// 256-bit keys, one per direction, derived from the cluster secret and both handshake nonces:
//   key(from -> to) = HMAC-SHA256(secret, "actorflow-data/frames/<job>/<from>><to>/" | nonce_a | nonce_c)
// so no other connection, earlier or later, shares them. Each frame then carries two tags: one
// after its header (checked before the payload is read, so a forged length never sizes a
// buffer) and one after its payload (when it has one). A tag is AES-256-GCM's GMAC over the
// bytes (they go as associated data: authenticated, not encrypted), with the 96-bit nonce
// (part, frame sequence number). Sequence numbers count the frames of one direction from 0 and
// are never sent: each side keeps its own count, so a replayed, reordered, dropped, cut short or
// altered frame fails its tag. GMAC runs at several GB/s per core (PCLMUL), so authenticating
// costs a pass over the bytes, made piece by piece as they are written or read (cache-warm).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace actorflow {

constexpr size_t kFrameKeyBytes = 32;
constexpr size_t kFrameTagBytes = 16;

// The keys of one connection, as one end sees them. enabled = false: frames carry no tags.
struct FrameKeys {
  bool enabled = false;
  unsigned char send[kFrameKeyBytes] = {};
  unsigned char receive[kFrameKeyBytes] = {};
};

// One direction's authenticator: the sender's tags or the receiver's checks. Not thread-safe
// (a connection's writer thread owns the sending one, its reader thread the receiving one).
class FrameAuthenticator {
 public:
  enum Part : uint32_t { kHeader = 0, kPayload = 1 };

  explicit FrameAuthenticator(const unsigned char key[kFrameKeyBytes]);
  ~FrameAuthenticator();
  FrameAuthenticator(const FrameAuthenticator&) = delete;
  FrameAuthenticator& operator=(const FrameAuthenticator&) = delete;

  // Starts the tag of `part` of the current frame; Add the bytes in order, in any pieces; then
  // Finish (the tag to send) or Check (against the tag received, constant time).
  void Begin(Part part);
  void Add(const void* data, size_t bytes);
  void Finish(unsigned char tag[kFrameTagBytes]);
  bool Check(const unsigned char tag[kFrameTagBytes]);
  // The frame is over (both parts): the next one gets the next sequence number.
  void EndFrame() { ++sequence_; }
  uint64_t sequence() const { return sequence_; }

 private:
  struct Cipher;
  std::unique_ptr<Cipher> cipher_;
  uint64_t sequence_ = 0;
};

}  // namespace actorflow
