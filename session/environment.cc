#include "session/environment.h"

#include <pthread.h>

#include <atomic>

namespace actorflow {
namespace {

std::atomic<uint64_t> g_generation{0};
Environment* g_global = nullptr;  // set once by Global(), never destroyed (see Global)

}  // namespace

std::shared_ptr<Environment> Environment::Global() {
  // Never destroyed: jobs still alive at exit hold it, and its threads must not be joined
  // during static destruction, when the runtimes using them may still exist.
  static std::shared_ptr<Environment>* global = [] {
    auto* made = new std::shared_ptr<Environment>(new Environment());
    g_global = made->get();
    pthread_atfork(
        // Hold the lock across fork() so the child never inherits it locked by a thread
        // that does not exist there.
        [] { g_global->mu_.lock(); }, [] { g_global->mu_.unlock(); }, &Environment::AfterForkInChild);
    return made;
  }();
  return *global;
}

void Environment::AfterForkInChild() {
  // Only this thread exists now; the lock was taken in the prepare handler.
  for (auto& [workers, system] : g_global->systems_) {
    system->AbandonAfterFork();
    new std::shared_ptr<ActorEnvironment>(system);  // runtimes of the parent may still point at it
  }
  g_global->systems_.clear();
  g_generation.fetch_add(1);
  g_global->mu_.unlock();
}

uint64_t Environment::generation() { return g_generation.load(std::memory_order_acquire); }

StatusOr<std::shared_ptr<ActorEnvironment>> Environment::ActorsFor(int num_workers) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = systems_.find(num_workers);
  if (it != systems_.end()) return it->second;
  EnvironmentOptions options;
  options.num_threads = num_workers;
  options.num_workers = num_workers;
  options.configure_system = configure_system_;
  AF_ASSIGN_OR_RETURN(std::shared_ptr<ActorEnvironment> made, ActorEnvironment::Create(options));
  systems_.emplace(num_workers, made);
  return made;
}

Status Environment::SetSystemConfigurator(std::function<void(caf::actor_system_config&)> configure) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!systems_.empty())
    return FailedPrecondition("Environment::SetSystemConfigurator: an actor system already exists; configure the "
                              "network layer before the first job is compiled");
  configure_system_ = std::move(configure);
  return Status::Ok();
}

int Environment::scheduler_threads() const {
  std::lock_guard<std::mutex> lock(mu_);
  int threads = 0;
  for (const auto& [workers, system] : systems_) threads += workers;
  return threads;
}

}  // namespace actorflow
