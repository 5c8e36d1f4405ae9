#include "tests/runtime/job.h"

#include <csignal>
#include <cstdlib>
#include <fcntl.h>
#include <fstream>
#include <sstream>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>

#include "rendezvous/server.h"
#include "tests/common/files.h"

namespace hvd::runtime::testing {

using hvd::test::readFile;

std::string buildPath(const std::string& relative) {
  const char* dir = std::getenv("HVD_BUILD_DIR");
  REQUIRE(dir != nullptr);
  return std::string(dir) + "/" + relative;
}

std::vector<WorkerResult> runJob(const JobOptions& options) {
  boost::asio::io_context ioc;
  std::unique_ptr<rendezvous::Server> server;
  std::thread server_thread;
  const std::string token = "test-token-1234";
  if (options.with_server) {
    rendezvous::ServerOptions so;
    so.token = token;
    server = std::make_unique<rendezvous::Server>(ioc, so);
    std::map<std::string, int> sizes{{"global", options.np}, {"local_localhost", options.np}};
    for (int r = 0; r < options.np; ++r) sizes["cross_" + std::to_string(r)] = 1;
    server->setScopeSizes(sizes);
    if (options.on_server) options.on_server(*server);
    server_thread = std::thread([&] { ioc.run(); });
  }

  const hvd::test::TempDir tmp("/tmp/hvd_job_");
  const std::string& dir = tmp.path();

  std::vector<pid_t> pids(options.np, -1);
  for (int rank = 0; rank < options.np; ++rank) {
    std::map<std::string, std::string> env = {
        {"HOROVOD_RANK", std::to_string(rank)},       {"HOROVOD_SIZE", std::to_string(options.np)},
        {"HOROVOD_LOCAL_RANK", std::to_string(rank)}, {"HOROVOD_LOCAL_SIZE", std::to_string(options.np)},
        {"HOROVOD_CROSS_RANK", "0"},                  {"HOROVOD_CROSS_SIZE", "1"},
        {"HOROVOD_HOSTNAME", "localhost"},
    };
    if (server) {
      env["HOROVOD_GLOO_RENDEZVOUS_ADDR"] = "127.0.0.1";
      env["HOROVOD_GLOO_RENDEZVOUS_PORT"] = std::to_string(server->port());
      env["HVD_RENDEZVOUS_TOKEN"] = token;
    }
    for (const auto& [k, v] : options.env) env[k] = v;
    if (auto it = options.rank_env.find(rank); it != options.rank_env.end()) {
      for (const auto& [k, v] : it->second) env[k] = v;
    }
    const std::string out = dir + "/rank" + std::to_string(rank);
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      const int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      if (fd < 0) ::_exit(126);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      for (const char* v : {"HOROVOD_GLOO_RENDEZVOUS_ADDR", "HOROVOD_GLOO_RENDEZVOUS_PORT", "HVD_RENDEZVOUS_TOKEN"}) {
        ::unsetenv(v);
      }
      for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
      std::vector<char*> argv;
      for (const auto& a : options.argv) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    pids[rank] = pid;
  }

  std::vector<WorkerResult> results(options.np);
  for (int rank = 0; rank < options.np; ++rank) results[rank].pid = pids[rank];
  const auto deadline = std::chrono::steady_clock::now() + options.timeout;
  int remaining = options.np;
  bool killed = false;
  while (remaining > 0) {
    bool progressed = false;
    for (int rank = 0; rank < options.np; ++rank) {
      if (pids[rank] < 0) continue;
      int status = 0;
      const pid_t rv = ::waitpid(pids[rank], &status, WNOHANG);
      if (rv == pids[rank]) {
        results[rank].rank = rank;
        if (WIFEXITED(status)) {
          results[rank].exit_code = WEXITSTATUS(status);
        } else if (WIFSIGNALED(status)) {
          results[rank].signal = WTERMSIG(status);
        }
        results[rank].timed_out = killed;
        pids[rank] = -1;
        --remaining;
        progressed = true;
      }
    }
    if (remaining == 0) break;
    if (!killed && std::chrono::steady_clock::now() > deadline) {
      for (pid_t pid : pids) {
        if (pid > 0) ::kill(pid, SIGKILL);
      }
      killed = true;
    }
    if (!progressed) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  for (int rank = 0; rank < options.np; ++rank) {
    const std::string out = dir + "/rank" + std::to_string(rank);
    results[rank].output = readFile(out);
  }
  if (server && options.on_finish) options.on_finish(*server);
  if (server) {
    server->stop();
    ioc.stop();
    server_thread.join();
  }
  return results;
}

std::string describe(const std::vector<WorkerResult>& results) {
  std::ostringstream s;
  for (const auto& r : results) {
    s << "--- rank " << r.rank << ": exit " << r.exit_code << " signal " << r.signal
      << (r.timed_out ? " (killed: job timed out)" : "") << "\n"
      << r.output;
  }
  return s.str();
}

void requireEveryRankPrinted(const std::vector<WorkerResult>& results, const std::string& text) {
  for (const auto& r : results) {
    INFO("rank " << r.rank << ", expected in its output: '" << text << "'");
    REQUIRE(r.exit_code == 0);
    CHECK(r.output.find(text) != std::string::npos);
  }
}

}  // namespace hvd::runtime::testing
