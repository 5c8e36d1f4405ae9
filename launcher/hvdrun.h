// hvdrun's program logic behind cmd/hvdrun.cc's main(): command line -> host plan -> job -> exit code.
//
// Exit codes: 0 success; the first failed worker's code (128 + N when it died of signal N); 128 + N when
// hvdrun itself was stopped by signal N (SIGINT, SIGTERM, SIGHUP); 2 usage error (flags, hosts, hostfile,
// config file); 1 any other error of hvdrun (cannot start a worker, start timeout, ssh preflight).
#pragma once

namespace hvd::launcher {

int hvdrunMain(int argc, char** argv);

}  // namespace hvd::launcher
