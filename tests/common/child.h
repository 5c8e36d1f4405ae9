// A child process whose first line of output the parent waits for (a server printing its port), shared by
// the C++ tests and benchmarks that start one.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <string>
#include <vector>

namespace hvd::test {

struct PrintingChild {
  pid_t pid = -1;          // -1: the pipe or the fork failed
  std::string first_line;  // without its '\n'; what came before EOF when the child printed no whole line
};

// Runs the program at `path` with `argv` (argv[0] included) in a child whose stdout is a pipe to this
// process, and reads the child's output up to its first newline. The child goes on running; the caller
// stops and reaps it.
inline PrintingChild startAndReadFirstLine(const std::string& path, const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  int out[2];
  PrintingChild child;
  if (::pipe(out) != 0) return child;
  child.pid = ::fork();
  if (child.pid == 0) {
    ::dup2(out[1], 1);
    ::close(out[0]);
    ::execv(path.c_str(), args.data());
    ::_exit(127);
  }
  ::close(out[1]);
  char c;
  while (child.pid > 0 && ::read(out[0], &c, 1) == 1 && c != '\n') child.first_line += c;
  ::close(out[0]);
  return child;
}

}  // namespace hvd::test
