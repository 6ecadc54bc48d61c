// Rank 0's TLS listener: CAF's OpenSSL sessions (the same certificate checks as CAF's OpenSSL
// module) behind a doorman of our own, so that a connection refused during the TLS handshake
// (no certificate, one the cluster CA did not sign, not TLS at all) is logged on rank 0's
// stderr with the peer's address. CAF's own module refuses such connections silently: Debian's
// CAF is built without logging and offers no hook into the handshake.
//
// Only accepting goes through here; connecting ranks use CAF's OpenSSL middleman actor.
#pragma once

#include <cstdint>
#include <string>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/io/middleman_actor.hpp>

#include "actors/status.h"

namespace actorflow {

class TlsListener {
 public:
  // Needs the OpenSSL module loaded with authentication (ConfigureClusterTls). `log_prefix`
  // begins each refusal line ("actorflow: cluster rank 0").
  explicit TlsListener(caf::actor_system& system, std::string log_prefix);
  ~TlsListener();
  TlsListener(const TlsListener&) = delete;
  TlsListener& operator=(const TlsListener&) = delete;

  // Publishes `whom` on host:port (port 0: a free one); returns the port bound.
  StatusOr<uint16_t> Publish(const caf::actor& whom, const std::string& host, uint16_t port);
  void Unpublish(const caf::actor& whom, uint16_t port);

 private:
  caf::actor_system& system_;
  caf::io::middleman_actor middleman_;  // CAF's middleman actor, listening through the logging doorman
};

}  // namespace actorflow
