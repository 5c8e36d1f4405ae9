// A program that ends with the thread that started it, when the starter asks for it in the environment.
//
// A Python driver that starts hvdrun, hvd-rendezvous or hvd-proxy wants it gone when the driver is killed,
// even by SIGKILL (Linux's parent-death signal, PR_SET_PDEATHSIG). Set in a subprocess preexec function, that
// signal makes Python fork the driver instead of vfork'ing it. With torch loaded, the fork costs about 30 ms,
// and it leaves every page of the driver copy-on-write for the rest of its life: a page fault on the first
// write to each, which on a 2-vCPU VM added about 0.4 s to an import of pandas and the interpreter's teardown
// after it. So the driver puts HVD_PARENT_DEATH_SIGNAL=<signal number>:<its pid> into the child's
// environment, and these programs call applyParentDeathSignal() first thing:
//   - the variable is removed from this process's environment, so nothing it starts inherits it;
//   - the signal is set with prctl(PR_SET_PDEATHSIG); it comes when the thread that started this process ends
//     (for a Python driver, the thread that called Popen);
//   - when this process's parent is no longer <pid> and <pid> has ended (the starter ended before the prctl),
//     the signal is raised at once, as a preexec function would have seen it. A parent other than <pid> while
//     <pid> lives is a program in between (a wrapper script that runs hvdrun without exec): the signal then
//     comes when that program ends.
// Absent or empty: nothing happens. A value that is not <signal 1-64>:<pid> throws UsageError naming it.
#pragma once

namespace hvd {

inline constexpr const char* kParentDeathSignalVariable = "HVD_PARENT_DEATH_SIGNAL";

void applyParentDeathSignal();

}  // namespace hvd
