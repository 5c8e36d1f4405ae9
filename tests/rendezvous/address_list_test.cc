// The compact Gloo address lists of gloo_backend/address_list.h: each shape round-trips to the addresses
// Gloo's pairs have (real ones from Debian's Gloo included), the fallback keeps every byte, and malformed
// values are one-line StoreErrors naming the key.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstring>

#include <gloo/transport/context.h>
#include <gloo/transport/pair.h>
#include <gloo/transport/tcp/device.h>

#include "gloo_backend/address_list.h"
#include "rendezvous/error.h"

using namespace hvd::gloo_backend;

namespace {

std::vector<char> address(int family, uint16_t port, int64_t seq, char garbage = 0) {
  std::vector<char> a(kGlooAddressBytes, garbage);
  if (family == AF_INET) {
    sockaddr_in sin{};
    sin.sin_family = AF_INET;
    sin.sin_port = htons(port);
    sin.sin_addr.s_addr = htonl(0x0a000001);
    std::memcpy(a.data(), &sin, sizeof sin);
  } else {
    sockaddr_in6 sin6{};
    sin6.sin6_family = static_cast<sa_family_t>(family);
    sin6.sin6_port = htons(port);
    sin6.sin6_addr.s6_addr[15] = 1;
    std::memcpy(a.data(), &sin6, sizeof sin6);
  }
  std::memcpy(a.data() + 128, &seq, sizeof seq);
  return a;
}

// What the decoder gives for an address of a compact shape: the family's sockaddr and the sequence
// number, zeros in between.
std::vector<char> canonical(std::vector<char> a) {
  const size_t length = reinterpret_cast<const sockaddr*>(a.data())->sa_family == AF_INET ? sizeof(sockaddr_in)
                                                                                          : sizeof(sockaddr_in6);
  std::fill(a.begin() + length, a.begin() + 128, 0);
  return a;
}

AddressList parse(const std::vector<char>& v, const std::string& where = "global/3") {
  return AddressList(v.data(), v.size(), where);
}

}  // namespace

TEST_CASE("address lists: one address and consecutive sequence numbers take O(1) bytes", "[gloo][address_list]") {
  for (int family : {AF_INET, AF_INET6}) {
    std::vector<std::vector<char>> in;
    for (int i = 0; i < 1000; ++i) in.push_back(address(family, 40000, 7 + i, static_cast<char>(i)));
    const auto blob = encodeAddressList(in);
    CHECK(blob.size() <= 7 + 1 + 28 + 8);
    const auto list = parse(blob);
    CHECK(list.shape() == AddressListShape::kSequence);
    REQUIRE(list.size() == in.size());
    for (size_t i = 0; i < in.size(); ++i) CHECK(list.at(i) == canonical(in[i]));
  }
}

TEST_CASE("address lists: a port per pair takes 2 bytes per peer", "[gloo][address_list]") {
  std::vector<std::vector<char>> in;
  for (int i = 0; i < 500; ++i) in.push_back(address(AF_INET, static_cast<uint16_t>(33000 + 17 * i), -1, 'x'));
  const auto blob = encodeAddressList(in);
  CHECK(blob.size() == 7 + 1 + 8 + 8 + 2 * in.size());  // the IPv4 sockaddr cut after its address
  const auto list = parse(blob);
  CHECK(list.shape() == AddressListShape::kPorts);
  REQUIRE(list.size() == in.size());
  for (size_t i = 0; i < in.size(); ++i) CHECK(list.at(i) == canonical(in[i]));
}

TEST_CASE("address lists: anything else is kept byte for byte", "[gloo][address_list]") {
  SECTION("different hosts") {
    auto other = address(AF_INET, 40001, -1, 'g');
    other[4] = 9;  // another IPv4 address
    const std::vector<std::vector<char>> in = {address(AF_INET, 40000, -1, 'g'), other};
    const auto blob = encodeAddressList(in);
    const auto list = parse(blob);
    CHECK(list.shape() == AddressListShape::kFull);
    CHECK(list.at(0) == in[0]);  // the padding's bytes too
    CHECK(list.at(1) == in[1]);
  }
  SECTION("sequence numbers that do not count up, on different ports") {
    const auto blob = encodeAddressList({address(AF_INET, 40000, 5), address(AF_INET, 40001, 9)});
    CHECK(parse(blob).shape() == AddressListShape::kFull);
  }
  SECTION("mixed families and unknown families") {
    const auto mixed = encodeAddressList({address(AF_INET, 1, -1), address(AF_INET6, 2, -1)});
    CHECK(parse(mixed).shape() == AddressListShape::kFull);
    const std::vector<std::vector<char>> unix_like = {address(AF_UNIX, 1, 0), address(AF_UNIX, 1, 1)};
    const auto blob = encodeAddressList(unix_like);
    const auto list = parse(blob);
    CHECK(list.shape() == AddressListShape::kFull);
    CHECK(list.at(1) == unix_like[1]);
  }
  SECTION("addresses of another size") {
    const std::vector<std::vector<char>> in = {std::vector<char>(20, 'a'), std::vector<char>(20, 'b')};
    const auto blob = encodeAddressList(in);
    const auto list = parse(blob);
    CHECK(list.shape() == AddressListShape::kFull);
    CHECK(list.at(1) == in[1]);
  }
  SECTION("no peers") {
    const auto blob = encodeAddressList({});
    CHECK(parse(blob).size() == 0);
  }
}

TEST_CASE("address lists: Debian's Gloo gives each pair its own port, and its pairs connect through the list",
          "[gloo][address_list]") {
  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  auto device = gloo::transport::tcp::CreateDevice(attr);
  auto a = device->createContext(0, 2);
  auto b = device->createContext(1, 2);
  // Rank 0 with peers 1..8 (a context of 9), as Communicator::connect publishes them.
  auto wide = device->createContext(0, 9);
  std::vector<std::vector<char>> pairs;
  for (int peer = 1; peer < 9; ++peer) pairs.push_back(wide->createPair(peer)->address().bytes());
  const auto blob = encodeAddressList(pairs);
  const auto list = parse(blob);
  INFO("shape " << static_cast<int>(list.shape()) << ", " << blob.size() << " bytes");
  CHECK(list.shape() != AddressListShape::kFull);
  CHECK(blob.size() < 8 * kGlooAddressBytes / 4);
  for (size_t i = 0; i < pairs.size(); ++i) CHECK(list.at(i) == canonical(pairs[i]));
  // Two pairs connected through decoded (zero-padded) addresses exchange data.
  const auto to_b = encodeAddressList({a->createPair(1)->address().bytes()});
  const auto to_a = encodeAddressList({b->createPair(0)->address().bytes()});
  std::thread connect_b([&] { b->getPair(0)->connect(parse(to_b, "1").at(0)); });
  a->getPair(1)->connect(parse(to_a, "0").at(0));
  connect_b.join();
  int sent = 42, received = 0;
  auto out = a->createUnboundBuffer(&sent, sizeof sent);
  auto in = b->createUnboundBuffer(&received, sizeof received);
  in->recv(0, 7);
  out->send(1, 7);
  out->waitSend(std::chrono::seconds(10));
  in->waitRecv(std::chrono::seconds(10));
  CHECK(received == 42);
}

TEST_CASE("address lists: malformed values are one-line StoreErrors naming the key", "[gloo][address_list]") {
  const auto good = encodeAddressList({address(AF_INET, 1, -1), address(AF_INET, 2, -1)});
  const auto fails = [](std::vector<char> v, const std::string& what) {
    INFO(what);
    try {
      parse(v, "http://127.0.0.1:9 (scope 'global') key 3");
      FAIL("accepted: " << what);
    } catch (const hvd::StoreError& e) {
      const std::string message = e.what();
      CHECK_THAT(message, Catch::Contains("malformed Gloo address list at http://127.0.0.1:9 (scope 'global') key 3: "));
      CHECK_THAT(message, Catch::Contains(what));
      CHECK(message.find('\n') == std::string::npos);
    }
  };
  fails({}, "0 bytes, shorter than the 7-byte header");
  // connectFullMesh's layout (136 bytes per peer, from a Horovod worker or an older libhvd).
  fails(std::vector<char>(2 * kGlooAddressBytes, 2), "not the magic");
  auto version = good;
  version[1] = 9;
  fails(version, "version 9, this build reads version 1");
  auto shape = good;
  shape[2] = 7;
  fails(shape, "unknown shape 7");
  auto cut = good;
  cut.pop_back();
  fails(cut, "where 2 entries take");
  auto longer = good;
  longer.push_back(0);
  fails(longer, "where 2 entries take");
  auto length = good;
  length[7] = 40;
  fails(length, "too short for a sockaddr of 40");
  auto wide = good;
  wide[7] = 20;
  wide.insert(wide.begin() + 8 + 8, 12, 0);
  fails(wide, "sockaddr of 20 bytes with family 2");
  auto family = good;
  family[8] = 77;
  fails(family, "with family 77");
  auto huge = encodeAddressList({std::vector<char>(20, 'a')});
  huge[3] = huge[4] = huge[5] = huge[6] = static_cast<char>(0xff);
  fails(huge, "cannot hold 4294967295 entries");
}
