// The data plane's connection handshake: both ends prove they hold the cluster secret (the
// launcher's ACTORFLOW_CLUSTER_SECRET) without sending it, against fresh nonces, so a stranger
// (or a recording of an earlier handshake) cannot open a data connection, and a connecting rank
// cannot be answered by a stranger that grabbed the port.
//
//   acceptor  -> connector: nonce_a (32 random bytes)
//   connector -> acceptor:  rank, job digest, frame mode, nonce_c,
//                           HMAC-SHA256(secret, "actorflow-data/connect" | job | rank | mode | nonce_a)
//   acceptor  -> connector: HMAC-SHA256(secret, "actorflow-data/accept" | job | acceptor rank | mode | nonce_c)
//
// It authenticates who connects. When both ends run with frame authentication (the mode; a
// mismatch is refused, and the mode is under the proofs so nobody on the path can turn it off)
// it also gives both ends the connection's fresh frame keys (comm/data_plane_frames.h, derived
// from the secret and both nonces); the frames that follow are then authenticated, never
// encrypted (docs/cluster.md "What is authenticated").
#pragma once

#include <chrono>
#include <string>

#include "actors/status.h"
#include "comm/data_plane_frames.h"

namespace actorflow {

struct DataHandshake {
  std::string secret;  // empty: no secret was configured; the proofs then only check the job
  std::string job_id;
  int rank = 0;        // this side's rank
  bool authenticate_frames = false;  // tag every frame (comm/data_plane_frames.h); both ends must agree
};

// The connecting side (the lower rank), on a connected socket: Ok once `peer` proved the secret.
// `keys` (optional) receives this end's frame keys (enabled when frames are authenticated).
Status ConnectHandshake(int fd, const DataHandshake& self, int peer, std::chrono::steady_clock::time_point deadline,
                        FrameKeys* keys = nullptr);
// The accepting side: the connecting rank once it proved the secret (and is a rank below this
// one), else the error saying why it was refused.
StatusOr<int> AcceptHandshake(int fd, const DataHandshake& self, std::chrono::steady_clock::time_point deadline,
                              FrameKeys* keys = nullptr);

}  // namespace actorflow
