// The compact Gloo address lists of gloo_backend/address_list.h: each shape round-trips to the addresses
// Gloo's pairs have (real ones from Debian's Gloo included), the fallback keeps every byte, and malformed
// values are one-line StoreErrors naming the key.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <functional>
#include <cstring>
#include <thread>

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

// by_rank with an empty entry at own, as Communicator::connect builds it.
std::vector<std::vector<char>> withOwn(std::vector<std::vector<char>> peers, size_t own) {
  peers.insert(peers.begin() + static_cast<long>(own), std::vector<char>());
  return peers;
}

// What a peer reads with the two sliced fetches: the header, then its own entry at its absolute rank.
std::vector<char> sliced(const std::vector<char>& value, size_t r, const std::string& where = "global/3") {
  const AddressListHeader header(std::string_view(value.data(), kAddressListHeaderBytes), where);
  const size_t at = header.entryOffset(r);
  CHECK(at == kAddressListHeaderBytes + r * header.entryBytes());
  return header.address(r, std::string_view(value.data() + at, header.entryBytes()));
}

// Every shape: the same header size, rank r's entry at header + r * entry, read alone or from the whole.
void checkSlices(const std::vector<std::vector<char>>& by_rank, size_t own, AddressListShape shape, size_t entry,
                 bool exact) {
  const auto blob = encodeAddressList(by_rank, own);
  const auto list = parse(blob);
  CHECK(list.shape() == shape);
  CHECK(list.header().entryBytes() == entry);
  CHECK(list.header().own() == own);
  REQUIRE(list.size() == by_rank.size());
  CHECK(blob.size() == kAddressListHeaderBytes + by_rank.size() * entry);
  for (size_t r = 0; r < by_rank.size(); ++r) {
    if (r == own) {
      CHECK(std::all_of(blob.begin() + static_cast<long>(kAddressListHeaderBytes + r * entry),
                        blob.begin() + static_cast<long>(kAddressListHeaderBytes + (r + 1) * entry),
                        [](char c) { return c == 0; }));
      continue;
    }
    const auto expected = exact ? by_rank[r] : canonical(by_rank[r]);
    CHECK(list.at(r) == expected);
    CHECK(sliced(blob, r) == expected);
  }
}

}  // namespace

TEST_CASE("address lists: one address and consecutive sequence numbers take a header and no entries",
          "[gloo][address_list]") {
  for (int family : {AF_INET, AF_INET6}) {
    for (size_t own : {size_t(0), size_t(417), size_t(999)}) {
      INFO("family " << family << ", own rank " << own);
      std::vector<std::vector<char>> peers;  // created in rank order, own skipped: consecutive numbers
      for (int i = 0; i < 999; ++i) peers.push_back(address(family, 40000, 7 + i, static_cast<char>(i)));
      checkSlices(withOwn(peers, own), own, AddressListShape::kSequence, 0, false);
    }
  }
}

TEST_CASE("address lists: a port per pair takes 2 bytes per rank", "[gloo][address_list]") {
  for (int family : {AF_INET, AF_INET6}) {
    for (size_t own : {size_t(0), size_t(250), size_t(500)}) {
      INFO("family " << family << ", own rank " << own);
      std::vector<std::vector<char>> peers;
      for (int i = 0; i < 500; ++i) peers.push_back(address(family, static_cast<uint16_t>(33000 + 17 * i), -1, 'x'));
      checkSlices(withOwn(peers, own), own, AddressListShape::kPorts, 2, false);
    }
  }
}

TEST_CASE("address lists: anything else is kept byte for byte", "[gloo][address_list]") {
  SECTION("different hosts") {
    auto other = address(AF_INET, 40001, -1, 'g');
    other[4] = 9;  // another IPv4 address
    checkSlices(withOwn({address(AF_INET, 40000, -1, 'g'), other}, 1), 1, AddressListShape::kFull,
                kGlooAddressBytes, true);
  }
  SECTION("sequence numbers that do not count up, on different ports") {
    checkSlices(withOwn({address(AF_INET, 40000, 5), address(AF_INET, 40001, 9)}, 0), 0, AddressListShape::kFull,
                kGlooAddressBytes, true);
  }
  SECTION("mixed families and unknown families") {
    checkSlices(withOwn({address(AF_INET, 1, -1), address(AF_INET6, 2, -1)}, 2), 2, AddressListShape::kFull,
                kGlooAddressBytes, true);
    checkSlices(withOwn({address(AF_UNIX, 1, 0), address(AF_UNIX, 1, 1)}, 1), 1, AddressListShape::kFull,
                kGlooAddressBytes, true);
  }
  SECTION("addresses of another size") {
    checkSlices(withOwn({std::vector<char>(20, 'a'), std::vector<char>(20, 'b')}, 0), 0, AddressListShape::kFull, 20,
                true);
  }
  SECTION("no peers") {
    const auto blob = encodeAddressList({{}}, 0);
    CHECK(blob.size() == kAddressListHeaderBytes);
    CHECK(parse(blob).size() == 1);
  }
}

TEST_CASE("address lists: Debian's Gloo gives each pair its own port, and its pairs connect through the list",
          "[gloo][address_list]") {
  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  auto device = gloo::transport::tcp::CreateDevice(attr);
  // Rank 4 of a context of 9, as Communicator::connect publishes it.
  auto wide = device->createContext(4, 9);
  std::vector<std::vector<char>> by_rank(9);
  for (int peer = 0; peer < 9; ++peer) {
    if (peer != 4) by_rank[peer] = wide->createPair(peer)->address().bytes();
  }
  const auto blob = encodeAddressList(by_rank, 4);
  const auto list = parse(blob);
  INFO("shape " << static_cast<int>(list.shape()) << ", " << blob.size() << " bytes");
  CHECK(list.shape() == AddressListShape::kPorts);  // what this machine's Gloo produces
  CHECK(blob.size() == kAddressListHeaderBytes + 9 * 2);
  for (size_t r = 0; r < 9; ++r) {
    if (r == 4) continue;
    CHECK(list.at(r) == canonical(by_rank[r]));
    CHECK(sliced(blob, r) == canonical(by_rank[r]));
  }
  // Three ranks connected pairwise through addresses read as a peer reads them: header and own entry only.
  constexpr int n = 3;
  std::vector<std::shared_ptr<gloo::transport::Context>> contexts;
  std::vector<std::vector<char>> values;
  for (int r = 0; r < n; ++r) {
    contexts.push_back(device->createContext(r, n));
    std::vector<std::vector<char>> mine(n);
    for (int peer = 0; peer < n; ++peer) {
      if (peer != r) mine[peer] = contexts[r]->createPair(peer)->address().bytes();
    }
    values.push_back(encodeAddressList(mine, r));
  }
  std::vector<std::thread> connects;
  for (int r = 0; r < n; ++r) {
    connects.emplace_back([&, r] {
      for (int peer = 0; peer < n; ++peer) {
        if (peer != r) contexts[r]->getPair(peer)->connect(sliced(values[peer], r, std::to_string(peer)));
      }
    });
  }
  for (auto& t : connects) t.join();
  for (int from = 0; from < n; ++from) {
    const int to = (from + 1) % n;
    int sent = 40 + from, received = 0;
    auto out = contexts[from]->createUnboundBuffer(&sent, sizeof sent);
    auto in = contexts[to]->createUnboundBuffer(&received, sizeof received);
    in->recv(from, 7);
    out->send(to, 7);
    out->waitSend(std::chrono::seconds(10));
    in->waitRecv(std::chrono::seconds(10));
    CHECK(received == 40 + from);
  }
}

TEST_CASE("address lists: malformed values are one-line StoreErrors naming the key", "[gloo][address_list]") {
  const auto good = encodeAddressList(withOwn({address(AF_INET, 1, -1), address(AF_INET, 2, -1)}, 0), 0);
  const std::string where = "http://127.0.0.1:9 (scope 'global') key 3";
  const auto check = [&](const std::function<void()>& read, const std::string& what) {
    INFO(what);
    try {
      read();
      FAIL("accepted: " << what);
    } catch (const hvd::StoreError& e) {
      const std::string message = e.what();
      CHECK_THAT(message, Catch::Contains("malformed Gloo address list at " + where + ": "));
      CHECK_THAT(message, Catch::Contains(what));
      CHECK(message.find('\n') == std::string::npos);
    }
  };
  const auto fails = [&](std::vector<char> v, const std::string& what) { check([&] { parse(v, where); }, what); };
  fails({}, "0 bytes, shorter than the 52-byte header");
  // connectFullMesh's layout (136 bytes per peer, from a Horovod worker or an older libhvd).
  fails(std::vector<char>(2 * kGlooAddressBytes, 2), "not the magic");
  auto version = good;
  version[1] = 1;  // the layout before the header had a fixed size
  fails(version, "version 1, this build reads version 2");
  auto shape = good;
  shape[2] = 7;
  fails(shape, "unknown shape 7");
  auto cut = good;
  cut.pop_back();
  fails(cut, "where 3 entries of 2 take 58");
  auto longer = good;
  longer.push_back(0);
  fails(longer, "where 3 entries of 2 take 58");
  auto header_cut = good;
  header_cut.resize(30);
  fails(header_cut, "30 bytes, shorter than the 52-byte header");
  auto own = good;
  own[8] = 3;
  fails(own, "own rank 3 in a scope of 3");
  auto entry = good;
  entry[12] = 5;
  fails(entry, "entries of 5 bytes where shape 2 has 2");
  auto length = good;
  length[3] = 20;
  fails(length, "sockaddr of 20 bytes with family 2");
  auto family = good;
  family[24] = 77;
  fails(family, "with family 77");
  auto full = encodeAddressList(withOwn({std::vector<char>(20, 'a')}, 1), 1);
  full[12] = full[13] = full[14] = full[15] = 0;
  fails(full, "entries of 0 bytes in a full list");
  // A slice cut short (the value ended inside rank 2's entry).
  const AddressListHeader header(std::string_view(good.data(), kAddressListHeaderBytes), where);
  check([&] { header.address(2, std::string_view(good.data() + header.entryOffset(2), 1)); },
        "the entry of rank 2 is 1 bytes, not 2 (the value is cut short)");
}
