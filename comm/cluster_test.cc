// The control plane with real processes on loopback (at most 3; every wait bounded): each rank
// is a cluster_node process whose stdout lines the test reads with a deadline.
#include "comm/cluster.h"
#include "comm/cluster_test_process.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

namespace actorflow {
namespace {

using namespace cluster_testing;
using std::chrono::milliseconds;

TEST(ClusterTest, TwoRanksRendezvousAndShutDownCleanly) {
  Node rank0(Args(0, 2, 0, {"--then", "shutdown"}));
  int port = PortOf(rank0);
  Node rank1(Args(1, 2, port, {"--then", "shutdown"}));
  EXPECT_EQ(rank0.LineStarting("rendezvous", kStep), "rendezvous ok");
  EXPECT_EQ(rank1.LineStarting("rendezvous", kStep), "rendezvous ok");
  EXPECT_EQ(rank0.LineStarting("shutdown", kStep), "shutdown ok");
  EXPECT_EQ(rank1.LineStarting("shutdown", kStep), "shutdown ok");
  EXPECT_EQ(rank0.Wait(kStep), 0);
  EXPECT_EQ(rank1.Wait(kStep), 0);
}

// Rank 0 exits once it received every leave, maybe before its reply to a leave was written out
// (seen under ASan on a loaded host: the other rank's Shutdown then waited for it until its
// timeout). Here rank 0 stops answering right after the shutdown barrier and exits: the leaving
// rank's Shutdown must end, ok, when rank 0's connection closes, not fail at its own 10 s
// timeout.
TEST(ClusterTest, ALeavingRankIsNotHeldByTheCoordinatorsLostReply) {
  Node rank0(Args(0, 2, 0, {"--then", "barrier-then-vanish"}));
  int port = PortOf(rank0);
  const auto start = Clock::now();
  Node rank1(Args(1, 2, port, {"--then", "shutdown"}));
  EXPECT_EQ(rank0.LineStarting("barrier", kStep), "barrier ok");
  EXPECT_EQ(rank1.LineStarting("shutdown", milliseconds(30000)), "shutdown ok");
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(9));
  EXPECT_EQ(rank1.Wait(kStep), 0);
}

// AllGatherText: every rank gets every rank's text in rank order, call by call.
TEST(ClusterTest, ThreeRanksGatherEachOthersTextsInRankOrder) {
  Node rank0(Args(0, 3, 0, {"--then", "gather"}));
  int port = PortOf(rank0);
  Node rank1(Args(1, 3, port, {"--then", "gather"}));
  Node rank2(Args(2, 3, port, {"--then", "gather"}));
  for (Node* node : {&rank0, &rank1, &rank2}) {
    EXPECT_EQ(node->LineStarting("gathered", kStep), "gathered a0|a1|a2");
    EXPECT_EQ(node->LineStarting("gathered", kStep), "gathered b0|b1|b2");
    EXPECT_EQ(node->LineStarting("shutdown", kStep), "shutdown ok");
    EXPECT_EQ(node->Wait(kStep), 0);
  }
}

TEST(ClusterTest, ThreeRanksRendezvousWhenRankZeroComesLast) {
  // Ranks 1 and 2 retry with backoff until rank 0 listens on the port they were given.
  int port = 0;
  {
    int probe = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(bind(probe, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
    socklen_t length = sizeof address;
    getsockname(probe, reinterpret_cast<sockaddr*>(&address), &length);
    port = ntohs(address.sin_port);
    close(probe);
  }
  Node rank1(Args(1, 3, port, {"--then", "shutdown"}));
  Node rank2(Args(2, 3, port, {"--then", "shutdown"}));
  usleep(300000);
  Node rank0(Args(0, 3, port, {"--then", "shutdown"}));
  EXPECT_EQ(rank0.LineStarting("rendezvous", kStep), "rendezvous ok");
  EXPECT_EQ(rank1.LineStarting("rendezvous", kStep), "rendezvous ok");
  EXPECT_EQ(rank2.LineStarting("rendezvous", kStep), "rendezvous ok");
  for (Node* node : {&rank0, &rank1, &rank2}) EXPECT_EQ(node->LineStarting("shutdown", kStep), "shutdown ok");
  for (Node* node : {&rank0, &rank1, &rank2}) EXPECT_EQ(node->Wait(kStep), 0);
}

TEST(ClusterTest, PlanMismatchNamesTheRankAndTheFirstDifferingOp) {
  Node rank0(Args(0, 3, 0, {"--plan", "input=a,dense=b,loss=c"}));
  int port = PortOf(rank0);
  Node rank1(Args(1, 3, port, {"--plan", "input=a,dense=b,loss=c"}));
  Node rank2(Args(2, 3, port, {"--plan", "input=a,dense=B,loss=c"}));
  for (Node* node : {&rank0, &rank1, &rank2}) {
    std::string line = node->LineStarting("error", kStep);
    EXPECT_NE(line.find("the plan of rank 2 differs from rank 0's"), std::string::npos) << line;
    EXPECT_NE(line.find("first differing op #1 'dense'"), std::string::npos) << line;
    EXPECT_EQ(line.find("rank 1"), std::string::npos) << "rank 1's plan is the same: " << line;
    EXPECT_EQ(node->Wait(kStep), 1);
  }
}

TEST(ClusterTest, VersionMismatchNamesBothVersions) {
  Node rank0(Args(0, 2, 0, {"--version", "0.1.0"}));
  int port = PortOf(rank0);
  Node rank1(Args(1, 2, port, {"--version", "0.2.0"}));
  std::string line = rank1.LineStarting("error", kStep);
  EXPECT_NE(line.find("rank 1 runs version '0.2.0', rank 0 runs '0.1.0'"), std::string::npos) << line;
  EXPECT_EQ(rank0.LineStarting("error", kStep), line);
}

TEST(ClusterTest, APeerWithTheWrongSecretIsRefusedAndTheRightOneStillJoins) {
  Node rank0(Args(0, 2, 0, {"--secret", "launch-a", "--then", "shutdown"}));
  int port = PortOf(rank0);
  Node stranger(Args(1, 2, port, {"--secret", "launch-b"}));
  std::string line = stranger.LineStarting("error", kStep);
  EXPECT_NE(line.find("refused by rank 0: this process (rank 1) presented the wrong cluster secret"), std::string::npos)
      << line;
  EXPECT_EQ(stranger.Wait(kStep), 1);
  Node no_secret(Args(1, 2, port));
  line = no_secret.LineStarting("error", kStep);
  EXPECT_NE(line.find("presented no cluster secret"), std::string::npos) << line;
  EXPECT_EQ(no_secret.Wait(kStep), 1);
  // The refused peers were not counted: the right rank 1 joins and the job runs.
  Node rank1(Args(1, 2, port, {"--secret", "launch-a", "--then", "shutdown"}));
  EXPECT_EQ(rank1.LineStarting("rendezvous", kStep), "rendezvous ok");
  EXPECT_EQ(rank0.LineStarting("rendezvous", kStep), "rendezvous ok");
  EXPECT_EQ(rank0.LineStarting("shutdown", kStep), "shutdown ok");
  EXPECT_EQ(rank1.LineStarting("shutdown", kStep), "shutdown ok");
  EXPECT_EQ(rank0.Wait(kStep), 0);
  EXPECT_EQ(rank1.Wait(kStep), 0);
}

TEST(ClusterTest, MissingPeerTimesOutNamingIt) {
  auto start = Clock::now();
  Node rank0(Args(0, 3, 0, {"--rendezvous-ms", "2000"}));
  int port = PortOf(rank0);
  Node rank1(Args(1, 3, port, {"--rendezvous-ms", "2000"}));
  std::string line = rank0.LineStarting("error", kStep);
  EXPECT_NE(line.find("timed out after 2000 ms: rank(s) [2] never joined"), std::string::npos) << line;
  EXPECT_EQ(rank1.LineStarting("error", kStep), line);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(8));
}

TEST(ClusterTest, UnreachableRankZeroIsAnErrorNamingTheAddress) {
  Node rank1(Args(1, 2, 1, {"--rendezvous-ms", "1000"}));  // port 1: nothing listens there
  std::string line = rank1.LineStarting("error", kStep);
  EXPECT_NE(line.find("rank 1 could not reach rank 0 at 127.0.0.1:1 within 1000 ms"), std::string::npos) << line;
  EXPECT_EQ(rank1.Wait(kStep), 1);
}

TEST(ClusterTest, RankOfAnotherJobCannotJoin) {
  Node rank0(Args(0, 2, 0, {"--job", "first", "--rendezvous-ms", "1500"}));
  int port = PortOf(rank0);
  Node stranger(Args(1, 2, port, {"--job", "second", "--rendezvous-ms", "1500"}));
  std::string refused = stranger.LineStarting("error", kStep);
  EXPECT_NE(refused.find("rank 1 could not reach rank 0 at 127.0.0.1:" + std::to_string(port)), std::string::npos)
      << refused;
  std::string timeout = rank0.LineStarting("error", kStep);
  EXPECT_NE(timeout.find("rank(s) [1] never joined"), std::string::npos) << timeout;
}

TEST(ClusterTest, PortInUseIsAClearError) {
  Node first(Args(0, 2, 0, {"--then", "sleep"}));
  int port = PortOf(first);
  Node second(Args(0, 2, port));
  std::string line = second.LineStarting("error", kStep);
  EXPECT_NE(line.find("cannot listen on 127.0.0.1:" + std::to_string(port)), std::string::npos) << line;
  EXPECT_EQ(second.Wait(kStep), 1);
}

// The listening sockets of this network namespace on `port` (from /proc/net/tcp, IPv4, and
// /proc/net/tcp6): their local addresses as /proc writes them ("0100007F" is 127.0.0.1).
std::vector<std::string> ListeningAddresses(int port) {
  std::vector<std::string> addresses;
  char wanted[8];
  std::snprintf(wanted, sizeof wanted, "%04X", port);
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    FILE* file = std::fopen(table, "r");
    if (file == nullptr) continue;
    char line[512];
    while (std::fgets(line, sizeof line, file) != nullptr) {
      char local[64] = {0}, remote[64] = {0}, state[8] = {0};
      if (std::sscanf(line, " %*d: %63s %63s %7s", local, remote, state) != 3) continue;
      std::string address = local;
      const size_t colon = address.rfind(':');
      if (colon == std::string::npos || address.substr(colon + 1) != wanted || std::string(state) != "0A") continue;
      addresses.push_back(address.substr(0, colon));
    }
    std::fclose(file);
  }
  return addresses;
}

TEST(ClusterTest, TheControlPlaneListensOnLoopbackOnly) {
  Node rank0(Args(0, 2, 0, {"--then", "sleep"}));
  const int port = PortOf(rank0);
  // Exactly one listener on the port, bound to 127.0.0.1, not to every interface (00000000).
  EXPECT_EQ(ListeningAddresses(port), std::vector<std::string>{"0100007F"});
}

// Survivors wait in a barrier the victim never enters; the victim's loss must end it.
// default_timing: the ClusterOptions defaults (1 s heartbeats, 5 s connection timeout), else
// 0.5 s / 3 s.
void ExpectLossDetected(int victim_rank, int signal_number, bool default_timing = false) {
  std::vector<std::string> fast = {"--heartbeat-ms", "500", "--connection-timeout-ms", "3000"};
  if (default_timing) fast.clear();
  auto role = [&](int rank) {
    std::vector<std::string> more = fast;
    more.push_back("--then");
    more.push_back(rank == victim_rank ? "sleep" : "barrier");
    return more;
  };
  Node rank0(Args(0, 3, 0, role(0)));
  int port = PortOf(rank0);
  Node rank1(Args(1, 3, port, role(1)));
  Node rank2(Args(2, 3, port, role(2)));
  Node* nodes[] = {&rank0, &rank1, &rank2};
  for (Node* node : nodes) ASSERT_EQ(node->LineStarting("rendezvous", kStep), "rendezvous ok");
  usleep(200000);  // let the survivors enter the barrier
  auto signalled = Clock::now();
  nodes[victim_rank]->Signal(signal_number);
  std::string lost = "lost rank " + std::to_string(victim_rank);
  for (int rank = 0; rank < 3; ++rank) {
    if (rank == victim_rank) continue;
    std::string pending = nodes[rank]->LineStarting("error", milliseconds(10000));
    auto detected = Clock::now() - signalled;
    EXPECT_NE(pending.find(lost), std::string::npos) << "rank " << rank << ": " << pending;
    EXPECT_LT(detected, std::chrono::seconds(10)) << "rank " << rank;
    EXPECT_NE(nodes[rank]->LineStarting("health", kStep).find(lost), std::string::npos) << "rank " << rank;
    EXPECT_NE(nodes[rank]->LineStarting("next", kStep).find(lost), std::string::npos) << "rank " << rank;
    EXPECT_EQ(nodes[rank]->Wait(kStep), 1);
    std::printf("rank %d detected the loss of rank %d in %lld ms\n", rank, victim_rank,
                static_cast<long long>(std::chrono::duration_cast<milliseconds>(detected).count()));
  }
}

TEST(ClusterTest, KilledPeerIsDetectedBySurvivors) { ExpectLossDetected(2, SIGKILL); }
TEST(ClusterTest, FrozenPeerIsDetectedBySurvivorsWithDefaultTiming) { ExpectLossDetected(1, SIGSTOP, true); }
TEST(ClusterTest, FrozenRankZeroIsDetectedBySurvivors) { ExpectLossDetected(0, SIGSTOP); }

TEST(ClusterTest, PlanIdentityNamesOps) {
  PlanIdentity a = PlanIdentity::FromOps({{"x", "1"}, {"y", "2"}});
  PlanIdentity b = PlanIdentity::FromOps({{"x", "1"}, {"y", "3"}});
  EXPECT_NE(a.digest, b.digest);
  EXPECT_EQ(a.op_digests[0], b.op_digests[0]);
  EXPECT_NE(a.op_digests[1], b.op_digests[1]);
  EXPECT_NE(PlanIdentity::FromBytes("ab").digest, PlanIdentity::FromBytes("ba").digest);
  EXPECT_EQ(Fnv1a64(""), 14695981039346656037ull);  // the FNV-1a offset basis
}

TEST(ClusterTest, EnvironmentWithoutNetworkLayerIsRefused) {
  EnvironmentOptions options;
  options.num_threads = 1;
  auto environment = ActorEnvironment::Create(options);
  ASSERT_TRUE(environment.ok());
  auto cluster = Cluster::Create(ClusterOptions{}, *environment);
  ASSERT_FALSE(cluster.ok());
  EXPECT_NE(cluster.status().message().find("no network layer"), std::string::npos);
}

TEST(ClusterTest, BadOptionsNameTheArgument) {
  ClusterOptions options;
  options.rank = 2;
  options.world_size = 2;
  EnvironmentOptions environment_options;
  environment_options.num_threads = 1;
  AddNetworkLayer(environment_options, options);
  auto environment = ActorEnvironment::Create(environment_options);
  ASSERT_TRUE(environment.ok());
  auto cluster = Cluster::Create(options, *environment);
  ASSERT_FALSE(cluster.ok());
  EXPECT_NE(cluster.status().message().find("got rank 2, world_size 2"), std::string::npos);
}

}  // namespace
}  // namespace actorflow
