// rendezvous_raw_request ADDRESS PORT [--status-only]: sends the bytes read from stdin to ADDRESS:PORT as
// they are, reads one HTTP response the way Horovod's client does (headers, then Content-Length bytes)
// and writes it to stdout (with --status-only: just the status code and a newline).
//
// A client with no library behind it, for tests that must put exact bytes on the wire from another
// process: a worker started by hvdrun, or a process of another user (setpriv).
// Exit codes: 0 a response arrived; 1 no response (the reason on stderr); 2 bad arguments.
#include <cstdio>
#include <cstring>
#include <iostream>
#include <iterator>
#include <string>

#include "tests/rendezvous/raw_client.h"

int main(int argc, char** argv) {
  const bool status_only = argc == 4 && std::strcmp(argv[3], "--status-only") == 0;
  if (argc != 3 && !status_only) {
    std::fprintf(stderr, "usage: rendezvous_raw_request ADDRESS PORT [--status-only] < request\n");
    return 2;
  }
  const std::string port_text = argv[2];
  if (port_text.empty() || port_text.find_first_not_of("0123456789") != std::string::npos ||
      port_text.size() > 5 || std::stoi(port_text) > 65535) {
    std::fprintf(stderr, "rendezvous_raw_request: invalid port '%s'\n", argv[2]);
    return 2;
  }
  const std::string request((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  try {
    hvd::rendezvous::testing::RawClient client(argv[1], static_cast<uint16_t>(std::stoi(port_text)));
    if (!client.send(request)) {
      std::fprintf(stderr, "rendezvous_raw_request: the server closed the connection while sending\n");
      return 1;
    }
    const std::string response = client.readResponse();
    const int status = hvd::rendezvous::testing::statusOf(response);
    if (status == 0) {
      std::fprintf(stderr, "rendezvous_raw_request: no HTTP response from %s:%s\n", argv[1], argv[2]);
      return 1;
    }
    if (status_only) {
      std::printf("%d\n", status);
    } else {
      std::fwrite(response.data(), 1, response.size(), stdout);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rendezvous_raw_request: %s\n", e.what());
    return 1;
  }
}
