// The data plane's connection handshake: both ends prove they hold the cluster secret (the
// launcher's ACTORFLOW_CLUSTER_SECRET) without sending it, against fresh nonces, so a stranger
// (or a recording of an earlier handshake) cannot open a data connection, and a connecting rank
// cannot be answered by a stranger that grabbed the port.
//
//   acceptor  -> connector: nonce_a (32 random bytes)
//   connector -> acceptor:  rank, job digest, nonce_c, HMAC-SHA256(secret, "actorflow-data/connect" | job | rank | nonce_a)
//   acceptor  -> connector: HMAC-SHA256(secret, "actorflow-data/accept" | job | acceptor rank | nonce_c)
//
// It authenticates who connects; it does not encrypt or authenticate the frames that follow
// (docs/cluster.md "What is authenticated").
#pragma once

#include <chrono>
#include <string>

#include "actors/status.h"

namespace actorflow {

struct DataHandshake {
  std::string secret;  // empty: no secret was configured; the proofs then only check the job
  std::string job_id;
  int rank = 0;        // this side's rank
};

// The connecting side (the lower rank), on a connected socket: Ok once `peer` proved the secret.
Status ConnectHandshake(int fd, const DataHandshake& self, int peer, std::chrono::steady_clock::time_point deadline);
// The accepting side: the connecting rank once it proved the secret (and is a rank below this
// one), else the error saying why it was refused.
StatusOr<int> AcceptHandshake(int fd, const DataHandshake& self, std::chrono::steady_clock::time_point deadline);

}  // namespace actorflow
