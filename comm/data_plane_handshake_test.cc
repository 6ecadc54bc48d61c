// The data plane's handshake on a socket pair (no network): ranks holding the same cluster
// secret connect; a wrong secret, another job, a higher rank, a replayed handshake or a silent
// stranger is refused with the reason, on both sides, within the deadline.
#include "comm/data_plane_handshake.h"

#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <future>
#include <string>
#include <vector>

namespace actorflow {
namespace {

using Clock = std::chrono::steady_clock;

struct Pair {
  Pair() { EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, ends), 0); }
  ~Pair() {
    close(ends[0]);
    close(ends[1]);
  }
  int ends[2] = {-1, -1};
};

struct Outcome {
  Status connected;
  StatusOr<int> accepted = -1;
  FrameKeys connector_keys, acceptor_keys;
};

Outcome Handshake(const DataHandshake& connector, const DataHandshake& acceptor) {
  Pair pair;
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  FrameKeys outcome_keys;
  auto accepting = std::async(std::launch::async, [&] {
    auto result = AcceptHandshake(pair.ends[1], acceptor, deadline, &outcome_keys);
    if (!result.ok()) shutdown(pair.ends[1], SHUT_RDWR);  // as the data plane closes a refused one
    return result;
  });
  Outcome outcome;
  outcome.connected = ConnectHandshake(pair.ends[0], connector, acceptor.rank, deadline, &outcome.connector_keys);
  EXPECT_EQ(accepting.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  outcome.accepted = accepting.get();
  outcome.acceptor_keys = outcome_keys;
  return outcome;
}

bool Same(const unsigned char* a, const unsigned char* b) { return std::memcmp(a, b, kFrameKeyBytes) == 0; }

TEST(DataPlaneHandshakeTest, AuthenticatingRanksGetFreshKeysPerConnectionAndDirection) {
  Outcome first = Handshake({"secret", "job", 0, true}, {"secret", "job", 1, true});
  ASSERT_TRUE(first.connected.ok()) << first.connected.message();
  ASSERT_TRUE(first.accepted.ok()) << first.accepted.status().message();
  ASSERT_TRUE(first.connector_keys.enabled && first.acceptor_keys.enabled);
  // What one end sends with, the other checks with; the two directions differ.
  EXPECT_TRUE(Same(first.connector_keys.send, first.acceptor_keys.receive));
  EXPECT_TRUE(Same(first.connector_keys.receive, first.acceptor_keys.send));
  EXPECT_FALSE(Same(first.connector_keys.send, first.connector_keys.receive));
  // The same ranks connecting again get other keys (fresh nonces): frames of one connection
  // cannot be replayed into another.
  Outcome second = Handshake({"secret", "job", 0, true}, {"secret", "job", 1, true});
  ASSERT_TRUE(second.connected.ok());
  EXPECT_FALSE(Same(first.connector_keys.send, second.connector_keys.send));
  EXPECT_FALSE(Same(first.connector_keys.receive, second.connector_keys.receive));
  // Without frame authentication no keys are handed out.
  Outcome plain = Handshake({"secret", "job", 0}, {"secret", "job", 1});
  ASSERT_TRUE(plain.connected.ok());
  EXPECT_FALSE(plain.connector_keys.enabled || plain.acceptor_keys.enabled);
}

TEST(DataPlaneHandshakeTest, RanksThatDisagreeOnFrameAuthenticationAreRefused) {
  Outcome outcome = Handshake({"secret", "job", 0, false}, {"secret", "job", 1, true});
  EXPECT_EQ(outcome.accepted.status().message(),
            "data plane of rank 1 refused a connection from rank 0: its data frame authentication is off, this "
            "rank's on (start every rank with the same --tls / ACTORFLOW_DATA_AUTH)");
  EXPECT_NE(outcome.connected.message().find("frame authentication is not off like this one's"), std::string::npos)
      << outcome.connected.message();
  EXPECT_FALSE(Handshake({"secret", "job", 0, true}, {"secret", "job", 1, false}).accepted.ok());
}

TEST(DataPlaneHandshakeTest, RanksWithTheSecretConnect) {
  Outcome outcome = Handshake({"secret", "job", 0}, {"secret", "job", 2});
  EXPECT_TRUE(outcome.connected.ok()) << outcome.connected.message();
  ASSERT_TRUE(outcome.accepted.ok()) << outcome.accepted.status().message();
  EXPECT_EQ(*outcome.accepted, 0);
}

TEST(DataPlaneHandshakeTest, AWrongSecretIsRefusedOnBothSides) {
  Outcome outcome = Handshake({"other", "job", 1}, {"secret", "job", 2});
  EXPECT_EQ(outcome.accepted.status().message(),
            "data plane of rank 2 refused a connection claiming rank 1: wrong proof of the cluster secret");
  EXPECT_NE(outcome.connected.message().find("data connection of rank 1 to rank 2: refused by the peer"),
            std::string::npos)
      << outcome.connected.message();
}

TEST(DataPlaneHandshakeTest, AnotherJobOrAHigherRankIsRefused) {
  EXPECT_EQ(Handshake({"secret", "other job", 0}, {"secret", "job", 1}).accepted.status().message(),
            "data plane of rank 1 refused a connection: it belongs to another job");
  EXPECT_EQ(Handshake({"secret", "job", 3}, {"secret", "job", 1}).accepted.status().message(),
            "data plane of rank 1 refused a connection claiming rank 3: only lower ranks connect");
}

TEST(DataPlaneHandshakeTest, AStrangerCannotPoseAsTheAcceptor) {
  // The connecting rank checks the answer too: an acceptor without the secret is refused.
  Outcome outcome = Handshake({"secret", "job", 0}, {"guess", "job", 1});
  EXPECT_FALSE(outcome.connected.ok());
  EXPECT_FALSE(outcome.accepted.ok());  // it cannot verify the connector's proof either
}

TEST(DataPlaneHandshakeTest, ARecordedHandshakeCannotBeReplayed) {
  // Record what a real rank 0 sends to rank 1, then replay it to a fresh acceptor: its nonce
  // differs, so the recorded proof is wrong.
  std::vector<unsigned char> recorded;
  {
    Pair pair;
    const auto deadline = Clock::now() + std::chrono::seconds(5);
    auto connecting = std::async(std::launch::async,
                                 [&] { return ConnectHandshake(pair.ends[0], {"secret", "job", 0}, 1, deadline); });
    unsigned char nonce[32] = {7};  // the acceptor's nonce of the recorded handshake
    ASSERT_EQ(write(pair.ends[1], nonce, sizeof nonce), static_cast<ssize_t>(sizeof nonce));
    recorded.resize(8 + 8 + 8 + 32 + 32);  // rank, job, mode, nonce, proof
    size_t got = 0;
    while (got < recorded.size()) {
      ssize_t n = read(pair.ends[1], recorded.data() + got, recorded.size() - got);
      ASSERT_GT(n, 0);
      got += static_cast<size_t>(n);
    }
    shutdown(pair.ends[1], SHUT_RDWR);
    EXPECT_EQ(connecting.wait_for(std::chrono::seconds(10)), std::future_status::ready);
    EXPECT_FALSE(connecting.get().ok());
  }
  Pair pair;
  auto accepting = std::async(std::launch::async, [&] {
    return AcceptHandshake(pair.ends[1], {"secret", "job", 1}, Clock::now() + std::chrono::seconds(5));
  });
  unsigned char fresh_nonce[32];
  ASSERT_EQ(read(pair.ends[0], fresh_nonce, sizeof fresh_nonce), static_cast<ssize_t>(sizeof fresh_nonce));
  ASSERT_EQ(write(pair.ends[0], recorded.data(), recorded.size()), static_cast<ssize_t>(recorded.size()));
  EXPECT_EQ(accepting.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_EQ(accepting.get().status().message(),
            "data plane of rank 1 refused a connection claiming rank 0: wrong proof of the cluster secret");
}

TEST(DataPlaneHandshakeTest, ASilentStrangerTimesOut) {
  Pair pair;
  const auto start = Clock::now();
  auto refused = AcceptHandshake(pair.ends[1], {"secret", "job", 1}, start + std::chrono::milliseconds(300));
  EXPECT_EQ(refused.status().message(),
            "data plane of rank 1 refused a connection: no complete handshake before the deadline");
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(3));
}

}  // namespace
}  // namespace actorflow
