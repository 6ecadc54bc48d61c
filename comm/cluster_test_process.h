// Cluster ranks as child processes (cluster_node) for the multi-process tests: each rank's
// stdout lines are read with a deadline, and a rank still running is killed when its Node goes.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

extern char** environ;

namespace actorflow {
namespace cluster_testing {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// A child process with its stdout on a pipe; killed (SIGKILL, after SIGCONT) when destroyed.
class Node {
 public:
  // with_stderr: its stderr lines are read too (interleaved with stdout's).
  explicit Node(const std::vector<std::string>& arguments, bool with_stderr = false) {
    int pipe_ends[2];
    EXPECT_EQ(pipe(pipe_ends), 0);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, pipe_ends[1], STDOUT_FILENO);
    if (with_stderr) posix_spawn_file_actions_adddup2(&actions, pipe_ends[1], STDERR_FILENO);
    posix_spawn_file_actions_addclose(&actions, pipe_ends[0]);
    std::vector<std::string> all = {CLUSTER_NODE_PATH};
    all.insert(all.end(), arguments.begin(), arguments.end());
    std::vector<char*> argv;
    for (auto& argument : all) argv.push_back(argument.data());
    argv.push_back(nullptr);
    EXPECT_EQ(posix_spawn(&pid_, CLUSTER_NODE_PATH, &actions, nullptr, argv.data(), environ), 0);
    posix_spawn_file_actions_destroy(&actions);
    close(pipe_ends[1]);
    output_ = pipe_ends[0];
  }
  ~Node() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGCONT);
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    close(output_);
  }

  // The next stdout line, or nullopt when `timeout` passes or the pipe closes first.
  std::optional<std::string> ReadLine(milliseconds timeout) {
    auto deadline = Clock::now() + timeout;
    for (;;) {
      size_t newline = buffer_.find('\n');
      if (newline != std::string::npos) {
        std::string line = buffer_.substr(0, newline);
        buffer_.erase(0, newline + 1);
        return line;
      }
      auto remaining = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
      if (remaining <= 0) return std::nullopt;
      pollfd descriptor{output_, POLLIN, 0};
      if (poll(&descriptor, 1, static_cast<int>(remaining)) <= 0) continue;
      char chunk[512];
      ssize_t got = read(output_, chunk, sizeof chunk);
      if (got <= 0) return std::nullopt;
      buffer_.append(chunk, static_cast<size_t>(got));
    }
  }
  // The next line that starts with `prefix` (earlier lines are skipped), or "" on timeout.
  std::string LineStarting(const std::string& prefix, milliseconds timeout) {
    auto deadline = Clock::now() + timeout;
    while (auto line = ReadLine(std::chrono::duration_cast<milliseconds>(deadline - Clock::now())))
      if (line->rfind(prefix, 0) == 0) return *line;
    return "";
  }
  // Exit status, or -1 when it is still running after `timeout`.
  int Wait(milliseconds timeout) {
    auto deadline = Clock::now() + timeout;
    while (Clock::now() < deadline) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        exited_ = true;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      usleep(10000);
    }
    return -1;
  }
  void Signal(int signal_number) { kill(pid_, signal_number); }

 private:
  pid_t pid_ = -1;
  int output_ = -1;
  bool exited_ = false;
  std::string buffer_;
};

inline std::vector<std::string> Args(int rank, int world, int port, std::vector<std::string> more = {}) {
  std::vector<std::string> arguments = {"--rank", std::to_string(rank), "--world", std::to_string(world),
                                        "--port", std::to_string(port)};
  arguments.insert(arguments.end(), more.begin(), more.end());
  return arguments;
}

// Rank 0 binds a free port and prints it; the others are told it.
inline int PortOf(Node& rank0) {
  std::string line = rank0.LineStarting("port ", milliseconds(10000));
  EXPECT_FALSE(line.empty()) << "rank 0 printed no port";
  return line.empty() ? 0 : std::stoi(line.substr(5));
}

constexpr milliseconds kStep{15000};

}  // namespace cluster_testing
}  // namespace actorflow
