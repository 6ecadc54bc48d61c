// Mutual TLS on the control plane, forced on loopback: ranks holding certificates of the
// cluster CA join; strangers (no TLS, TLS without a certificate, a certificate of another CA)
// are refused during the handshake and the job goes on; configuration mistakes are clear
// errors before anything listens. Certificates are made with the openssl command (Debian
// `openssl`) in a fresh temporary directory per test.
#include "comm/cluster_tls.h"

#include <stdlib.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "comm/cluster.h"
#include "comm/cluster_test_process.h"

namespace actorflow {
namespace {

using namespace cluster_testing;
using std::chrono::milliseconds;

std::string RunShell(const std::string& command) {
  int status = std::system(command.c_str());
  return status == 0 ? "" : "`" + command + "` failed with status " + std::to_string(status);
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// A temporary directory with two CAs ("cluster" and "other") and one node certificate each.
class Certificates {
 public:
  Certificates() {
    char pattern[] = "/tmp/actorflow-tls-test-XXXXXX";
    const char* made = mkdtemp(pattern);
    EXPECT_NE(made, nullptr);
    directory_ = made ? made : "";
    for (const char* name : {"cluster", "other"}) {
      std::string ca = Path(std::string(name) + "-ca"), node = Path(std::string(name) + "-node");
      const std::string key = " -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes ";
      error_ += RunShell("openssl req -x509" + key + "-keyout " + ca + ".key -out " + ca + ".pem -subj /CN=" + name +
                    "-ca -days 1 2>/dev/null");
      error_ += RunShell("openssl req" + key + "-keyout " + node + ".key -out " + node + ".csr -subj /CN=" + name +
                    "-node 2>/dev/null");
      error_ += RunShell("openssl x509 -req -in " + node + ".csr -CA " + ca + ".pem -CAkey " + ca + ".key -CAcreateserial -out " +
                    node + ".pem -days 1 2>/dev/null");
    }
  }
  ~Certificates() {
    std::error_code ignored;
    if (!directory_.empty()) std::filesystem::remove_all(directory_, ignored);
  }
  std::string Path(const std::string& name) const { return directory_ + "/" + name; }
  const std::string& error() const { return error_; }
  ClusterTls Tls(const std::string& node, const std::string& ca) const {
    return ClusterTls{Path(node + "-node.pem"), Path(node + "-node.key"), Path(ca + "-ca.pem")};
  }
  std::vector<std::string> Flags(const std::string& node, const std::string& ca) const {
    ClusterTls tls = Tls(node, ca);
    return {"--cert", tls.certificate_file, "--key", tls.key_file, "--ca", tls.ca_file};
  }

 private:
  std::string directory_;
  std::string error_;
};

std::vector<std::string> Join(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(ClusterTlsTest, RanksWithTheClusterCertificatesJoinAndStrangersAreRefused) {
  Certificates certificates;
  ASSERT_EQ(certificates.error(), "");
  const auto cluster = certificates.Flags("cluster", "cluster");
  Node rank0(Args(0, 2, 0, Join({"--rendezvous-ms", "30000", "--then", "shutdown"}, cluster)), /*with_stderr=*/true);
  const int port = PortOf(rank0);
  ASSERT_GT(port, 0);
  // A rank of this job holding another CA's certificate: the TLS handshake fails (it does not
  // accept rank 0's certificate, rank 0 does not accept its), so it never reaches rank 0.
  Node foreign(Args(1, 2, port, Join({"--rendezvous-ms", "1500"}, certificates.Flags("other", "other"))));
  EXPECT_NE(foreign.LineStarting("error: cluster rank 1 could not reach rank 0", kStep), "");
  EXPECT_EQ(foreign.Wait(kStep), 1);
  // A rank without TLS (plain BASP): refused the same way.
  Node plain(Args(1, 2, port, {"--rendezvous-ms", "1500"}));
  EXPECT_NE(plain.LineStarting("error: cluster rank 1 could not reach rank 0", kStep), "");
  EXPECT_EQ(plain.Wait(kStep), 1);
  // A TLS client that trusts the cluster CA: without a certificate rank 0 ends the handshake
  // with "certificate required", with another CA's certificate with "unknown ca", and with a
  // cluster certificate the handshake succeeds (so the refusals above are the certificates').
  const std::string client = "(sleep 1) | timeout 10 openssl s_client -connect 127.0.0.1:" + std::to_string(port) +
                             " -CAfile " + certificates.Path("cluster-ca.pem");
  const std::string transcript = certificates.Path("s_client.txt");
  EXPECT_NE(RunShell(client + " > " + transcript + " 2>&1"), "");
  EXPECT_NE(ReadText(transcript).find("alert certificate required"), std::string::npos) << ReadText(transcript);
  EXPECT_NE(RunShell(client + " -cert " + certificates.Path("other-node.pem") + " -key " +
                certificates.Path("other-node.key") + " > " + transcript + " 2>&1"),
            "");
  EXPECT_NE(ReadText(transcript).find("alert unknown ca"), std::string::npos) << ReadText(transcript);
  EXPECT_EQ(RunShell(client + " -cert " + certificates.Path("cluster-node.pem") + " -key " +
                certificates.Path("cluster-node.key") + " > " + transcript + " 2>&1"),
            "")
      << ReadText(transcript);
  // Rank 0 logged each refusal with the peer's address (the ranks above retried with backoff:
  // at least one line each; the three TLS clients: one each, the last one accepted).
  const std::string refused = "actorflow: cluster rank 0 refused a control-plane connection from 127.0.0.1:";
  int refusals = 0;
  while (!rank0.LineStarting(refused, milliseconds(refusals < 4 ? 5000 : 300)).empty()) ++refusals;
  EXPECT_GE(refusals, 4);
  // The job was not disturbed: the right rank 1 joins, both shut down cleanly.
  Node rank1(Args(1, 2, port, Join({"--then", "shutdown"}, cluster)));
  EXPECT_EQ(rank0.LineStarting("rendezvous", kStep), "rendezvous ok");
  EXPECT_EQ(rank1.LineStarting("rendezvous", kStep), "rendezvous ok");
  EXPECT_EQ(rank0.LineStarting("shutdown", kStep), "shutdown ok");
  EXPECT_EQ(rank1.LineStarting("shutdown", kStep), "shutdown ok");
  EXPECT_EQ(rank0.Wait(kStep), 0);
  EXPECT_EQ(rank1.Wait(kStep), 0);
}

TEST(ClusterTlsTest, ConfigurationMistakesNameTheFile) {
  Certificates certificates;
  ASSERT_EQ(certificates.error(), "");
  EXPECT_TRUE(CheckClusterTls(certificates.Tls("cluster", "cluster")).ok());
  ClusterTls partial{certificates.Path("cluster-node.pem"), "", ""};
  EXPECT_EQ(CheckClusterTls(partial).message(),
            "cluster TLS needs a certificate, its key and the cluster CA's certificate; missing: key_file, ca_file "
            "(without all three CAF's OpenSSL module would not authenticate peers)");
  ClusterTls missing = certificates.Tls("cluster", "cluster");
  missing.key_file = certificates.Path("no-such.key");
  EXPECT_EQ(CheckClusterTls(missing).message(),
            "cluster TLS: cannot read the key file '" + missing.key_file + "': No such file or directory");
  ClusterTls swapped = certificates.Tls("cluster", "cluster");
  swapped.key_file = certificates.Path("other-node.key");
  EXPECT_NE(CheckClusterTls(swapped).message().find("does not belong to the certificate"), std::string::npos)
      << CheckClusterTls(swapped).message();
  ClusterTls not_pem = certificates.Tls("cluster", "cluster");
  not_pem.certificate_file = certificates.Path("cluster-node.csr");  // a request, not a certificate
  EXPECT_NE(CheckClusterTls(not_pem).message().find("holds no usable PEM certificate"), std::string::npos)
      << CheckClusterTls(not_pem).message();
  EXPECT_EQ(CheckClusterTls(certificates.Tls("other", "cluster")).message(),
            "cluster TLS: the certificate in '" + certificates.Path("other-node.pem") + "' is not valid under the CA in '" +
                certificates.Path("cluster-ca.pem") + "': unable to get local issuer certificate");
  // Through the node: the error comes before anything listens, and the process says it.
  Node node(Args(0, 2, 0, Join({"--rendezvous-ms", "1000"}, certificates.Flags("other", "cluster"))));
  EXPECT_NE(node.LineStarting("error: cluster TLS: the certificate in", kStep), "");
  EXPECT_EQ(node.Wait(kStep), 1);
}

TEST(ClusterTlsTest, NonLoopbackWithoutTlsIsRefused) {
  ClusterOptions options;
  options.world_size = 2;
  options.coordinator_host = "0.0.0.0";
  EnvironmentOptions environment_options;
  environment_options.num_threads = 1;
  AddNetworkLayer(environment_options, options);
  auto environment = ActorEnvironment::Create(environment_options);
  ASSERT_TRUE(environment.ok()) << environment.status().message();
  auto cluster = Cluster::Create(options, *environment);
  ASSERT_FALSE(cluster.ok());
  EXPECT_EQ(cluster.status().message(),
            "cluster: coordinator_host '0.0.0.0' is not a loopback address; off loopback the control plane requires "
            "mutual TLS (ClusterOptions::tls: certificate, key and cluster CA files)");
  EXPECT_TRUE(IsLoopbackHost("127.0.0.1"));
  EXPECT_TRUE(IsLoopbackHost("127.1.2.3"));
  EXPECT_TRUE(IsLoopbackHost("::1"));
  EXPECT_TRUE(IsLoopbackHost("localhost"));
  EXPECT_FALSE(IsLoopbackHost("10.0.0.1"));
  EXPECT_FALSE(IsLoopbackHost("::"));
}

TEST(ClusterTlsTest, AnEnvironmentWithoutTheSameTlsFilesIsRefused) {
  Certificates certificates;
  ASSERT_EQ(certificates.error(), "");
  ClusterOptions options;
  options.world_size = 2;
  EnvironmentOptions environment_options;
  environment_options.num_threads = 1;
  AddNetworkLayer(environment_options, options);  // no TLS in the environment
  auto environment = ActorEnvironment::Create(environment_options);
  ASSERT_TRUE(environment.ok()) << environment.status().message();
  options.tls = certificates.Tls("cluster", "cluster");
  auto cluster = Cluster::Create(options, *environment);
  ASSERT_FALSE(cluster.ok());
  EXPECT_NE(cluster.status().message().find("the actor environment has no OpenSSL module"), std::string::npos)
      << cluster.status().message();
}

}  // namespace
}  // namespace actorflow
