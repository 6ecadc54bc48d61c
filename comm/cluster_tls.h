// Mutual TLS for the control plane (CAF's OpenSSL module, docs/cluster.md "What is
// authenticated"): every rank holds a certificate signed by the cluster's CA and accepts only
// peers holding one too.
//
// CAF's module falls back to anonymous encryption (no peer is authenticated) when it has no
// certificate, key or CA file, and it reads the files only when a connection opens, where a
// broken file aborts the process. So the files are checked here, before anything listens or
// connects, and a mistake is an error naming the file and the reason, never a quiet fallback.
#pragma once

#include <string>

#include <caf/actor_system_config.hpp>

#include "actors/status.h"

namespace actorflow {

// PEM files: this rank's certificate (it may carry intermediate certificates after it), its
// private key (unencrypted) and the cluster CA's certificate. All three, or none (no TLS:
// loopback only).
struct ClusterTls {
  std::string certificate_file;
  std::string key_file;
  std::string ca_file;

  bool enabled() const { return !certificate_file.empty() || !key_file.empty() || !ca_file.empty(); }
};

// Ok when all three files are readable PEM, the key matches the certificate and the CA
// verifies the certificate; else an error naming the file (or the missing field) and OpenSSL's
// reason.
Status CheckClusterTls(const ClusterTls& tls);

// Loads CAF's OpenSSL module with the three files (call after loading the io middleman).
void ConfigureClusterTls(caf::actor_system_config& config, const ClusterTls& tls);

// Ok when `system` has the OpenSSL module loaded with exactly these files, so that a
// connection can only be mutually authenticated; else an error saying what differs.
Status CheckSystemUsesClusterTls(const caf::actor_system& system, const ClusterTls& tls);

// True for 127.0.0.0/8, ::1 and "localhost": addresses no other machine can reach.
bool IsLoopbackHost(const std::string& host);

}  // namespace actorflow
