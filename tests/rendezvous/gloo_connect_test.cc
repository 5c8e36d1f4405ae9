// Communicator::connect's pair connects end once the rendezvous is over (gloo_backend/connect_watch.h),
// instead of waiting out Gloo's 5 x timeout for a peer that published its addresses and left.
#include <catch2/catch.hpp>

#include <netinet/in.h>

#include <chrono>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gloo/transport/context.h>
#include <gloo/transport/pair.h>
#include <gloo/transport/tcp/device.h>

#include "base/error.h"
#include "gloo_backend/address_list.h"
#include "gloo_backend/communicator.h"
#include "gloo_backend/device.h"
#include "tests/common/throws.h"
#include "tests/rendezvous/recording_store.h"

using hvd::gloo_backend::Communicator;
using hvd::gloo_backend::CommunicatorOptions;
using hvd::gloo_backend::Device;
using Clock = std::chrono::steady_clock;

TEST_CASE("gloo connect: a rank listening for a peer that never connects stops once its key is deleted",
          "[gloo][connect]") {
  auto store = std::make_shared<hvd::test::RecordingStore>();
  hvd::rendezvous::PrefixStore global("global", store);
  // Rank 1 publishes an address for rank 0 and never connects. Its port reads 65535 so that rank 0 is the
  // pair's listening side (Gloo's pair connects from the higher address to the lower), the side that waits.
  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  auto peer_device = gloo::transport::tcp::CreateDevice(attr);
  auto peer_context = peer_device->createContext(1, 2);
  auto address = peer_context->createPair(0)->address().bytes();
  sockaddr_in sin{};
  REQUIRE(address.size() >= sizeof sin);
  std::memcpy(&sin, address.data(), sizeof sin);
  REQUIRE(sin.sin_family == AF_INET);
  sin.sin_port = 0xFFFF;
  std::memcpy(address.data(), &sin, sizeof sin);
  global.set("1", hvd::gloo_backend::encodeAddressList({address, {}}, 1));

  std::string error;
  Clock::time_point thrown;
  std::thread rank0([&] {
    hvd::gloo_backend::DeviceOptions device_options;
    device_options.hostname = "127.0.0.1";
    auto device = Device::create(device_options);
    CommunicatorOptions options;
    options.rank = 0;
    options.size = 2;
    options.timeout = std::chrono::seconds(5);  // Gloo alone listens for 5 x 5 s
    try {
      error = hvd::test::thrownWhat<hvd::StoreError>("connect returned without its peer",
                                                     [&] { Communicator::connect(store, device, options); });
    } catch (const std::exception& e) {
      error = std::string("not a StoreError: ") + e.what();
    }
    thrown = Clock::now();
  });
  // Rank 0 has read every key it needs and is connecting (listening); then the round's keys are dropped.
  const auto reading_by = Clock::now() + std::chrono::seconds(20);
  while (store->fetches() < 2 && Clock::now() < reading_by)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const bool connecting = store->fetches() >= 2;
  const auto deleted = Clock::now();
  global.deleteKey("0");
  global.deleteKey("1");
  rank0.join();
  REQUIRE(connecting);
  INFO(error);
  CHECK(error.find("scope 'global' on rank 0 of 2 stopped waiting for its peers to connect") !=
        std::string::npos);
  CHECK(error.find("its key '0' was deleted") != std::string::npos);
  // One check interval after the deletion, with slack for a loaded machine; without the watch, 25 s.
  CHECK(thrown - deleted < std::chrono::seconds(10));
}
