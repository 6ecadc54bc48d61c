#include "comm/data_plane_handshake.h"

#include "comm/cluster.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

namespace actorflow {

namespace {

constexpr size_t kNonce = 32;
constexpr size_t kMac = 32;

struct ConnectMessage {
  uint64_t rank = 0;  // 64 bits: no padding goes on the wire
  uint64_t job = 0;
  uint64_t mode = 0;  // 1: frames authenticated
  unsigned char nonce[kNonce] = {};
  unsigned char mac[kMac] = {};
};

uint64_t JobDigest(const std::string& job_id) { return Fnv1a64(job_id); }  // as the frames carry it

uint64_t Mode(const DataHandshake& self) { return self.authenticate_frames ? 1 : 0; }

const char* ModeName(uint64_t mode) { return mode == 1 ? "on" : "off"; }

void Mac(const DataHandshake& self, const char* role, int rank, const unsigned char* nonce, unsigned char* out) {
  std::string message = std::string("actorflow-data/") + role + "/" + self.job_id + "/" + std::to_string(rank) + "/" +
                        std::to_string(Mode(self)) + "/";
  message.append(reinterpret_cast<const char*>(nonce), kNonce);
  unsigned int length = kMac;
  HMAC(EVP_sha256(), self.secret.data(), static_cast<int>(self.secret.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), out, &length);
}

// key(from -> to) = HMAC-SHA256(secret, "actorflow-data/frames/<job>/<from>><to>/" | nonce_a | nonce_c).
void FrameKey(const DataHandshake& self, int from, int to, const unsigned char* acceptor_nonce,
              const unsigned char* connector_nonce, unsigned char* out) {
  std::string message = "actorflow-data/frames/" + self.job_id + "/" + std::to_string(from) + ">" + std::to_string(to) + "/";
  message.append(reinterpret_cast<const char*>(acceptor_nonce), kNonce);
  message.append(reinterpret_cast<const char*>(connector_nonce), kNonce);
  unsigned int length = kFrameKeyBytes;
  HMAC(EVP_sha256(), self.secret.data(), static_cast<int>(self.secret.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), out, &length);
}

void FillKeys(const DataHandshake& self, int peer, const unsigned char* acceptor_nonce, const unsigned char* connector_nonce,
              FrameKeys* keys) {
  if (keys == nullptr) return;
  keys->enabled = self.authenticate_frames;
  if (!keys->enabled) return;
  FrameKey(self, self.rank, peer, acceptor_nonce, connector_nonce, keys->send);
  FrameKey(self, peer, self.rank, acceptor_nonce, connector_nonce, keys->receive);
}

// Reads or writes all `n` bytes before `deadline`; false on timeout, error or end of stream.
bool Transfer(int fd, void* data, size_t n, bool reading, std::chrono::steady_clock::time_point deadline) {
  auto* bytes = static_cast<unsigned char*>(data);
  while (n > 0) {
    const auto remaining =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    pollfd descriptor{fd, static_cast<short>(reading ? POLLIN : POLLOUT), 0};
    if (remaining <= 0 || poll(&descriptor, 1, static_cast<int>(remaining)) <= 0) return false;
    ssize_t done = reading ? read(fd, bytes, n) : write(fd, bytes, n);
    if (done < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (done <= 0) return false;
    bytes += done;
    n -= static_cast<size_t>(done);
  }
  return true;
}

}  // namespace

Status ConnectHandshake(int fd, const DataHandshake& self, int peer, std::chrono::steady_clock::time_point deadline,
                        FrameKeys* keys) {
  const std::string who = "data connection of rank " + std::to_string(self.rank) + " to rank " + std::to_string(peer);
  unsigned char acceptor_nonce[kNonce];
  if (!Transfer(fd, acceptor_nonce, kNonce, true, deadline))
    return FailedPrecondition(who + ": no handshake from the peer before the deadline");
  ConnectMessage message;
  message.rank = static_cast<uint64_t>(self.rank);
  message.job = JobDigest(self.job_id);
  message.mode = Mode(self);
  if (RAND_bytes(message.nonce, kNonce) != 1) return FailedPrecondition(who + ": no random bytes for a nonce");
  Mac(self, "connect", self.rank, acceptor_nonce, message.mac);
  if (!Transfer(fd, &message, sizeof message, false, deadline))
    return FailedPrecondition(who + ": the peer closed the connection during the handshake");
  unsigned char answer[kMac], expected[kMac];
  if (!Transfer(fd, answer, kMac, true, deadline))
    return FailedPrecondition(who + ": refused by the peer (it did not accept this rank's proof of the cluster "
                                    "secret: another launch's process, a stranger on its port, or a rank whose data "
                                    "frame authentication is not " + ModeName(Mode(self)) + " like this one's?)");
  Mac(self, "accept", peer, message.nonce, expected);
  if (CRYPTO_memcmp(answer, expected, kMac) != 0)
    return FailedPrecondition(who + ": the peer could not prove the cluster secret (a stranger on rank " +
                              std::to_string(peer) + "'s data port?)");
  FillKeys(self, peer, acceptor_nonce, message.nonce, keys);
  return Status::Ok();
}

StatusOr<int> AcceptHandshake(int fd, const DataHandshake& self, std::chrono::steady_clock::time_point deadline,
                              FrameKeys* keys) {
  const std::string who = "data plane of rank " + std::to_string(self.rank) + " refused a connection";
  unsigned char nonce[kNonce];
  if (RAND_bytes(nonce, kNonce) != 1) return FailedPrecondition(who + ": no random bytes for a nonce");
  ConnectMessage message;
  if (!Transfer(fd, nonce, kNonce, false, deadline) || !Transfer(fd, &message, sizeof message, true, deadline))
    return FailedPrecondition(who + ": no complete handshake before the deadline");
  if (message.job != JobDigest(self.job_id)) return FailedPrecondition(who + ": it belongs to another job");
  if (message.rank >= static_cast<uint64_t>(self.rank))
    return FailedPrecondition(who + " claiming rank " + std::to_string(message.rank) + ": only lower ranks connect");
  const int peer = static_cast<int>(message.rank);
  if (message.mode != Mode(self))
    return FailedPrecondition(who + " from rank " + std::to_string(peer) + ": its data frame authentication is " +
                              ModeName(message.mode) + ", this rank's " + ModeName(Mode(self)) +
                              " (start every rank with the same --tls / ACTORFLOW_DATA_AUTH)");
  unsigned char expected[kMac];
  Mac(self, "connect", peer, nonce, expected);
  if (CRYPTO_memcmp(message.mac, expected, kMac) != 0)
    return FailedPrecondition(who + " claiming rank " + std::to_string(peer) +
                              ": wrong proof of the cluster secret");
  unsigned char answer[kMac];
  Mac(self, "accept", self.rank, message.nonce, answer);
  if (!Transfer(fd, answer, kMac, false, deadline))
    return FailedPrecondition(who + " from rank " + std::to_string(peer) + ": it closed during the handshake");
  FillKeys(self, peer, nonce, message.nonce, keys);
  return peer;
}

}  // namespace actorflow
