// The control plane on the process-wide environment (session/environment.h): its own test
// binary, because the configurator must be set before the process's first actor system.
#include <gtest/gtest.h>

#include <caf/actor_system.hpp>

#include "comm/cluster.h"
#include "session/environment.h"

namespace actorflow {
namespace {

TEST(ClusterEnvironmentTest, RunsOnTheSessionEnvironmentsActorSystem) {
  auto environment = Environment::Global();
  ASSERT_EQ(environment->scheduler_threads(), 0) << "this binary must make no actor system before this test";
  ClusterOptions options;  // one rank: rendezvous with itself
  ASSERT_TRUE(environment->SetSystemConfigurator(NetworkLayerConfigurator(options)).ok());
  auto actors = environment->ActorsFor(1);
  ASSERT_TRUE(actors.ok()) << actors.status().ToString();
  EXPECT_TRUE((*actors)->system().has_middleman());
  EXPECT_EQ(environment->scheduler_threads(), 1);  // the network layer adds no scheduler worker
  auto cluster = Cluster::Create(options, *actors);
  ASSERT_TRUE(cluster.ok()) << cluster.status().ToString();
  EXPECT_GT((*cluster)->port(), 0);
  EXPECT_TRUE((*cluster)->Rendezvous(PlanIdentity::FromBytes("plan")).ok());
  EXPECT_TRUE((*cluster)->Shutdown(std::chrono::milliseconds(5000)).ok());
  // Too late once a system exists: it cannot gain the network layer.
  Status late = environment->SetSystemConfigurator(NetworkLayerConfigurator(options));
  EXPECT_FALSE(late.ok());
  EXPECT_NE(late.message().find("already exists"), std::string::npos) << late.message();
}

}  // namespace
}  // namespace actorflow
