// Test helpers: run a program to completion capturing its output, and inspect the process table (/proc).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "tests/common/files.h"

namespace hvd::launcher::test {

struct Completed {
  int exit_code = -1;  // 128 + N for signal N
  std::string out;
  std::string err;
  std::chrono::milliseconds elapsed{0};
};

// Runs argv (argv[0] looked up in PATH) with extra environment entries "NAME=VALUE", feeding `input` to its
// stdin. Kills it and fails the test after `timeout`.
Completed runProcess(const std::vector<std::string>& argv, const std::vector<std::string>& env = {},
                     const std::string& input = "",
                     std::chrono::milliseconds timeout = std::chrono::milliseconds(60000));

// A started process whose output goes to files in `dir` (out.txt, err.txt).
struct Started {
  pid_t pid = -1;
  std::string dir;
};
Started startProcess(const std::vector<std::string>& argv, const std::string& dir,
                     const std::vector<std::string>& env = {});
// Waits for a started process; returns its shell code or -1 on timeout.
int waitProcess(pid_t pid, std::chrono::milliseconds timeout);

// Pids of live (non-zombie) processes whose environment contains `marker` ("NAME=VALUE").
std::vector<pid_t> processesWithEnv(const std::string& marker);
// Polls processesWithEnv until it is empty or `timeout` passes; returns what is left.
std::vector<pid_t> waitUntilGone(const std::string& marker, std::chrono::milliseconds timeout);

std::string hvdrunPath();  // $HVD_TEST_HVDRUN, else $HVD_BUILD_DIR/hvdrun
using hvd::test::readFile;
// A fresh directory under /tmp for a test's files, removed with them when it goes.
hvd::test::TempDir tempDir();
// A unique marker "HVD_TEST_MARKER=<random>" to find a test's workers in /proc.
std::string uniqueMarker();

}  // namespace hvd::launcher::test
