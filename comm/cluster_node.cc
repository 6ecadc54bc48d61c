// One cluster rank as a process, for the multi-process tests (cluster_test.cc) and for trying
// the control plane by hand. Prints one line per event on stdout ("port N", "rendezvous ok",
// "error: ...", "barrier ok", "shutdown ok") and exits 0 when every step succeeded, 1 otherwise.
//
//   cluster_node --rank R --world N [--port P] [--version V] [--plan op=bytes,op=bytes]
//                [--rendezvous-ms T] [--heartbeat-ms H] [--connection-timeout-ms C]
//                [--job ID] [--secret S] [--then exit|barrier|sleep|shutdown|barrier-then-vanish|gather]
//                [--host H] [--cert FILE --key FILE --ca FILE]   (mutual TLS on the control plane)
//
// --then barrier: after rendezvous, wait in a barrier no other rank enters (it can only end by a
// peer's loss or its 60 s timeout), then call health() and Barrier again: both must fail.
// --then sleep: stay alive up to 60 s (the victim of the fault tests).
// --then gather: two all-gathers of texts ("a<rank>", then "b<rank>"), each printed as
// "gathered x|y|z" in rank order, then shutdown.
// --then barrier-then-vanish: pass one barrier (the others' shutdown barrier), then keep the
// actors from answering anything (the one scheduler thread busy) and exit 1 s later: rank 0
// gone while the others leave, their leave unanswered.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include <caf/all.hpp>

#include "comm/cluster.h"

namespace {

void Say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

// Failures exit at once: the peers may be gone, and the point is the message, not a teardown.
int Fail(const actorflow::Status& status) {
  Say("error: " + status.message());
  std::_Exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  actorflow::ClusterOptions options;
  options.rendezvous_timeout = std::chrono::milliseconds(10000);
  std::string plan_text = "input=a,dense=b,loss=c";
  std::string then = "exit";
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    const char* value = argv[i + 1];
    if (flag == "--rank") options.rank = std::atoi(value);
    else if (flag == "--world") options.world_size = std::atoi(value);
    else if (flag == "--port") options.coordinator_port = static_cast<uint16_t>(std::atoi(value));
    else if (flag == "--version") options.version = value;
    else if (flag == "--job") options.job_id = value;
    else if (flag == "--secret") options.secret = value;
    else if (flag == "--plan") plan_text = value;
    else if (flag == "--host") options.coordinator_host = value;
    else if (flag == "--cert") options.tls.certificate_file = value;
    else if (flag == "--key") options.tls.key_file = value;
    else if (flag == "--ca") options.tls.ca_file = value;
    else if (flag == "--rendezvous-ms") options.rendezvous_timeout = std::chrono::milliseconds(std::atoi(value));
    else if (flag == "--heartbeat-ms") options.heartbeat_interval = std::chrono::milliseconds(std::atoi(value));
    else if (flag == "--connection-timeout-ms") options.connection_timeout = std::chrono::milliseconds(std::atoi(value));
    else if (flag == "--then") then = value;
    else {
      Say("error: unknown flag " + flag);
      return 2;
    }
  }
  std::vector<std::pair<std::string, std::string>> ops;
  for (size_t start = 0; start < plan_text.size();) {
    size_t end = plan_text.find(',', start);
    if (end == std::string::npos) end = plan_text.size();
    std::string item = plan_text.substr(start, end - start);
    size_t equals = item.find('=');
    ops.emplace_back(item.substr(0, equals), equals == std::string::npos ? "" : item.substr(equals + 1));
    start = end + 1;
  }
  actorflow::EnvironmentOptions environment_options;
  environment_options.num_threads = 1;
  actorflow::AddNetworkLayer(environment_options, options);
  auto environment = actorflow::ActorEnvironment::Create(environment_options);
  if (!environment.ok()) return Fail(environment.status());
  {
    auto cluster = actorflow::Cluster::Create(options, *environment);
    if (!cluster.ok()) return Fail(cluster.status());
    Say("port " + std::to_string((*cluster)->port()));
    actorflow::Status joined = (*cluster)->Rendezvous(actorflow::PlanIdentity::FromOps(ops));
    if (!joined.ok()) return Fail(joined);
    Say("rendezvous ok");
    if (then == "barrier") {
      actorflow::Status pending = (*cluster)->Barrier(std::chrono::milliseconds(60000));
      Say(pending.ok() ? "barrier ok" : "error: " + pending.message());
      actorflow::Status health = (*cluster)->health();
      Say(health.ok() ? "health ok" : "health error: " + health.message());
      actorflow::Status next = (*cluster)->Barrier(std::chrono::milliseconds(1000));
      Say(next.ok() ? "next ok" : "next error: " + next.message());
      std::_Exit(pending.ok() || health.ok() || next.ok() ? 0 : 1);
    } else if (then == "barrier-then-vanish") {
      actorflow::Status passed = (*cluster)->Barrier(std::chrono::milliseconds(20000));
      (*environment)->system().spawn([] { std::this_thread::sleep_for(std::chrono::seconds(5)); });
      Say(passed.ok() ? "barrier ok" : "error: " + passed.message());
      std::this_thread::sleep_for(std::chrono::seconds(1));
      std::_Exit(0);
    } else if (then == "gather") {
      for (const char* prefix : {"a", "b"}) {
        auto texts = (*cluster)->AllGatherText(prefix + std::to_string(options.rank), std::chrono::milliseconds(10000));
        if (!texts.ok()) return Fail(texts.status());
        std::string line;
        for (const std::string& text : texts.value()) line += (line.empty() ? "" : "|") + text;
        Say("gathered " + line);
      }
      actorflow::Status done = (*cluster)->Shutdown(std::chrono::milliseconds(10000));
      if (!done.ok()) return Fail(done);
      Say("shutdown ok");
    } else if (then == "sleep") {
      std::this_thread::sleep_for(std::chrono::seconds(60));
    } else if (then == "shutdown") {
      actorflow::Status done = (*cluster)->Shutdown(std::chrono::milliseconds(10000));
      if (!done.ok()) return Fail(done);
      Say("shutdown ok");
    }
  }
  // The normal path tears down in order (cluster, then environment) so that it stays tested.
  return 0;
}
