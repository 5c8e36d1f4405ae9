// The compact Gloo address lists of gloo_backend/address_list.h: each shape round-trips to the addresses
// Gloo's pairs have (real ones from Debian's Gloo included), read from the whole value, from the whole
// header and an entry, and (IPv4, kFull) from the 20-byte peer prefix and an entry as connect reads them;
// the fallback keeps every byte, and malformed values are one-line StoreErrors naming the key. And
// Communicator::connect itself: the ranges it fetches (the prefix; the whole headers only for IPv6).
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>

#include <gloo/transport/context.h>
#include <gloo/transport/pair.h>
#include <gloo/transport/tcp/device.h>

#include "base/error.h"
#include "gloo_backend/address_list.h"
#include "gloo_backend/communicator.h"
#include "gloo_backend/device.h"
#include "rendezvous/memory_store.h"
#include "tests/rendezvous/recording_store.h"

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

// What a peer reads with the two sliced fetches: the whole header, then its own entry at its absolute rank.
std::vector<char> sliced(const std::vector<char>& value, size_t r, const std::string& where = "global/3") {
  const AddressListHeader header(std::string_view(value.data(), kAddressListHeaderBytes), where);
  const size_t at = header.entryOffset(r);
  CHECK(at == kAddressListHeaderBytes + r * header.entryBytes());
  return header.address(r, std::string_view(value.data() + at, header.entryBytes()));
}

// The same from the peer prefix alone, as connect reads an IPv4 or kFull list: the publisher's rank is the
// key's.
std::vector<char> prefixSliced(const std::vector<char>& value, size_t publisher, size_t r,
                               const std::string& where = "global/3") {
  const std::string_view prefix(value.data(), kAddressListPeerBytes);
  CHECK_FALSE(AddressListHeader::needsFullHeader(prefix));
  const AddressListHeader header(prefix, publisher, where);
  CHECK(header.own() == publisher);
  return header.address(r, std::string_view(value.data() + header.entryOffset(r), header.entryBytes()));
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
    // With the publisher's rank from the key: the whole header, and for IPv4 and kFull the prefix alone.
    const AddressListHeader whole(std::string_view(blob.data(), kAddressListHeaderBytes), own, "global/3");
    CHECK(whole.address(r, std::string_view(blob.data() + whole.entryOffset(r), entry)) == expected);
    const bool ipv6 = shape != AddressListShape::kFull &&
                      reinterpret_cast<const sockaddr*>(by_rank[r].data())->sa_family == AF_INET6;
    CHECK(AddressListHeader::needsFullHeader(std::string_view(blob.data(), kAddressListPeerBytes)) == ipv6);
    if (!ipv6) CHECK(prefixSliced(blob, own, r) == expected);
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
  fails({}, "0 bytes, shorter than the 44-byte header");
  // connectFullMesh's layout (136 bytes per peer, from a Horovod worker or an older libhvd).
  fails(std::vector<char>(2 * kGlooAddressBytes, 2), "not the magic");
  auto version = good;
  version[1] = 1;  // the layout before the header had a fixed size
  fails(version, "version 1, this build reads version 3");
  auto shape = good;
  shape[2] = 7;
  fails(shape, "unknown shape 7");
  auto cut = good;
  cut.pop_back();
  fails(cut, "where 3 entries of 2 take 50");
  auto longer = good;
  longer.push_back(0);
  fails(longer, "where 3 entries of 2 take 50");
  auto header_cut = good;
  header_cut.resize(30);
  fails(header_cut, "30 bytes, shorter than the 44-byte header");
  auto own = good;
  own[40] = 3;
  fails(own, "own rank 3 in a scope of 3");
  auto entry = good;
  entry[14] = 5;
  fails(entry, "entries of 5 bytes where shape 2 has 2");
  auto family = good;
  family[3] = 20;
  fails(family, "family code 20, not 4 (IPv4) or 6 (IPv6)");
  auto full = encodeAddressList(withOwn({std::vector<char>(20, 'a')}, 1), 1);
  REQUIRE(parse(full).shape() == AddressListShape::kFull);
  auto full_family = full;
  full_family[3] = 4;
  fails(full_family, "family code 4 in a full list");
  full[14] = full[15] = 0;
  fails(full, "entries of 0 bytes in a full list");
  // Read with the publisher's rank from the key: the prefix cut short, a whole header of another rank, a
  // prefix of a smaller scope.
  const auto read = [&](size_t bytes, size_t publisher, const std::string& what) {
    check([&] { AddressListHeader(std::string_view(good.data(), bytes), publisher, where); }, what);
  };
  read(kAddressListPeerBytes - 1, 0, "19 bytes, shorter than the 20-byte peer prefix");
  read(kAddressListHeaderBytes, 1, "published by rank 0, read from rank 1's key (a peer of another job?)");
  read(kAddressListPeerBytes, 3, "read from rank 3's key, published for a scope of 3 (a peer of another job?)");
  read(kAddressListHeaderBytes, 3, "published by rank 0, read from rank 3's key");
  // A slice cut short (the value ended inside rank 2's entry).
  const AddressListHeader header(std::string_view(good.data(), kAddressListHeaderBytes), where);
  check([&] { header.address(2, std::string_view(good.data() + header.entryOffset(2), 1)); },
        "the entry of rank 2 is 1 bytes, not 2 (the value is cut short)");
}

TEST_CASE("address lists: the 20-byte peer prefix decodes IPv4 and full lists as the whole header does",
          "[gloo][address_list]") {
  const size_t n = 6, own = 2;
  std::vector<std::vector<char>> sequence, ports;
  for (size_t i = 0; i + 1 < n; ++i) {
    sequence.push_back(address(AF_INET, 40000, 11 + static_cast<int64_t>(i), 'q'));
    ports.push_back(address(AF_INET, static_cast<uint16_t>(50000 + 3 * i), -1, 'q'));
  }
  auto mixed = ports;
  mixed[3][4] = 77;  // another host: kFull
  for (const auto& [peers, shape] : {std::pair{sequence, AddressListShape::kSequence},
                                     std::pair{ports, AddressListShape::kPorts},
                                     std::pair{mixed, AddressListShape::kFull}}) {
    const auto by_rank = withOwn(peers, own);
    const auto blob = encodeAddressList(by_rank, own);
    INFO("shape " << static_cast<int>(shape));
    REQUIRE(parse(blob).shape() == shape);
    const std::string_view prefix(blob.data(), kAddressListPeerBytes);
    CHECK_FALSE(AddressListHeader::needsFullHeader(prefix));
    const AddressListHeader from_prefix(prefix, own, "global/2");
    const AddressListHeader from_whole(std::string_view(blob.data(), kAddressListHeaderBytes), "global/2");
    CHECK(from_prefix.shape() == shape);
    CHECK(from_prefix.size() == n);
    CHECK(from_prefix.own() == own);
    CHECK(from_prefix.entryBytes() == from_whole.entryBytes());
    for (size_t r = 0; r < n; ++r) {
      if (r == own) continue;
      const std::string_view entry(blob.data() + from_whole.entryOffset(r), from_whole.entryBytes());
      const auto expected = shape == AddressListShape::kFull ? by_rank[r] : canonical(by_rank[r]);
      CHECK(from_whole.address(r, entry) == expected);
      CHECK(from_prefix.address(r, entry) == expected);
    }
  }
}

TEST_CASE("address lists: an IPv6 list needs the whole header", "[gloo][address_list]") {
  for (const int64_t seq : {int64_t(-1), int64_t(5)}) {
    std::vector<std::vector<char>> peers;
    for (int i = 0; i < 3; ++i) {
      auto a = address(AF_INET6, static_cast<uint16_t>(seq == -1 ? 41000 + i : 41000), seq == -1 ? -1 : seq + i);
      sockaddr_in6 sin6;
      std::memcpy(&sin6, a.data(), sizeof sin6);
      sin6.sin6_flowinfo = htonl(0x12345);
      sin6.sin6_scope_id = 3;
      for (int b = 0; b < 16; ++b) sin6.sin6_addr.s6_addr[b] = static_cast<uint8_t>(0x20 + b);  // every byte
      std::memcpy(a.data(), &sin6, sizeof sin6);
      peers.push_back(a);
    }
    const auto by_rank = withOwn(peers, 1);
    const auto blob = encodeAddressList(by_rank, 1);
    INFO("sequence " << seq);
    REQUIRE(parse(blob).shape() == (seq == -1 ? AddressListShape::kPorts : AddressListShape::kSequence));
    const std::string_view prefix(blob.data(), kAddressListPeerBytes);
    CHECK(AddressListHeader::needsFullHeader(prefix));
    try {
      AddressListHeader(prefix, 1, "global/1");
      FAIL("an IPv6 list was parsed from its prefix");
    } catch (const hvd::StoreError& e) {
      CHECK_THAT(e.what(), Catch::Contains("malformed Gloo address list at global/1: an IPv6 list read from its "
                                           "first 20 bytes: its address needs the whole 44-byte header"));
    }
    const AddressListHeader header(std::string_view(blob.data(), kAddressListHeaderBytes), 1, "global/1");
    for (const size_t r : {size_t(0), size_t(2), size_t(3)}) {
      const auto got = header.address(r, std::string_view(blob.data() + header.entryOffset(r), header.entryBytes()));
      CHECK(got == canonical(by_rank[r]));
    }
  }
}

TEST_CASE("address lists: sequence numbers outside i32 are kept whole", "[gloo][address_list]") {
  const int64_t big = int64_t(INT32_MAX) + 1, small = int64_t(INT32_MIN) - 1;
  SECTION("consecutive from past i32: kFull") {
    checkSlices(withOwn({address(AF_INET, 40000, big), address(AF_INET, 40000, big + 1)}, 0), 0,
                AddressListShape::kFull, kGlooAddressBytes, true);
  }
  SECTION("one port per pair, below i32: kFull") {
    checkSlices(withOwn({address(AF_INET, 40000, small), address(AF_INET, 40001, small)}, 2), 2,
                AddressListShape::kFull, kGlooAddressBytes, true);
  }
  SECTION("the first in i32, the next past it: kSequence, decoded in 64 bits") {
    checkSlices(withOwn({address(AF_INET, 40000, INT32_MAX), address(AF_INET, 40000, big)}, 1), 1,
                AddressListShape::kSequence, 0, false);
  }
  SECTION("-1, the unset number, and i32's ends stay compact") {
    for (const int64_t seq : {int64_t(-1), int64_t(INT32_MIN), int64_t(INT32_MAX)}) {
      checkSlices(withOwn({address(AF_INET, 40000, seq), address(AF_INET, 40001, seq)}, 0), 0,
                  AddressListShape::kPorts, 2, false);
    }
  }
}

TEST_CASE("address lists: an IPv4 sockaddr with a non-zero sin_zero is kept whole", "[gloo][address_list]") {
  auto a = address(AF_INET, 40000, -1), b = address(AF_INET, 40001, -1);
  b[offsetof(sockaddr_in, sin_zero) + 3] = 1;
  checkSlices(withOwn({a, b}, 0), 0, AddressListShape::kFull, kGlooAddressBytes, true);
}

TEST_CASE("address lists: a version-2 value is refused naming both versions", "[gloo][address_list]") {
  // A version-2 ports list of rank 0 of 3, as the previous layout wrote it: magic, version, shape,
  // sockaddr length, count, own rank, entry bytes, i64 sequence number, 28 sockaddr bytes, 2-byte entries.
  std::vector<char> v2(52 + 3 * 2, 0);
  v2[0] = static_cast<char>(0xA7);
  v2[1] = 2;
  v2[2] = static_cast<char>(AddressListShape::kPorts);
  v2[3] = sizeof(sockaddr_in);
  v2[4] = 3;
  v2[12] = 2;
  std::memset(v2.data() + 16, 0xFF, 8);
  const auto sin = address(AF_INET, 0, -1);
  std::memcpy(v2.data() + 24, sin.data(), sizeof(sockaddr_in));
  v2[52 + 2] = 1;
  v2[52 + 4] = 2;
  CHECK_FALSE(AddressListHeader::needsFullHeader(std::string_view(v2.data(), kAddressListPeerBytes)));
  const std::string message = "malformed Gloo address list at global/0: version 2, this build reads version 3";
  CHECK_THROWS_WITH(parse(v2, "global/0"), message);
  CHECK_THROWS_WITH(AddressListHeader(std::string_view(v2.data(), kAddressListPeerBytes), 0, "global/0"), message);
  CHECK_THROWS_WITH(AddressListHeader(std::string_view(v2.data(), kAddressListHeaderBytes), 0, "global/0"), message);
  CHECK_THROWS_AS(parse(v2, "global/0"), hvd::StoreError);
}

using hvd::test::RecordingStore;

TEST_CASE("address lists: connect fetches every peer prefix, and every whole header only for IPv6",
          "[gloo][address_list]") {
  for (const std::string host : {"127.0.0.1", "::1"}) {
    INFO("host " << host);
    const bool ipv6 = host == "::1";
    constexpr int n = 3;
    auto store = std::make_shared<RecordingStore>();
    std::vector<std::string> errors(n);
    std::vector<float> sums(n, 0);
    std::vector<std::thread> ranks;
    for (int r = 0; r < n; ++r) {
      ranks.emplace_back([&, r] {
        try {
          hvd::gloo_backend::DeviceOptions device_options;
          device_options.hostname = host;
          auto device = Device::create(device_options);
          CommunicatorOptions options;
          options.rank = r;
          options.size = n;
          options.timeout = std::chrono::seconds(20);
          auto communicator = Communicator::connect(store, device, options);
          float value = static_cast<float>(r + 1);
          communicator->allreduce(&value, 1, DataType::kFloat32, ReduceOp::kSum);
          sums[r] = value;
          communicator->close();
        } catch (const std::exception& e) {
          errors[r] = e.what();
        }
      });
    }
    for (auto& t : ranks) t.join();
    for (int r = 0; r < n; ++r) {
      INFO("rank " << r);
      CHECK(errors[r] == "");  // shows the message when not
      CHECK(sums[r] == 6.0f);
    }
    CHECK(store->count({0, kAddressListPeerBytes, true}) == n);  // equal prefixes by reference
    CHECK(store->count({0, kAddressListHeaderBytes}) == (ipv6 ? n : 0));
    for (size_t r = 0; r < n; ++r) CHECK(store->count({kAddressListHeaderBytes + 2 * r, 2}) == 1);  // kPorts
    CHECK(store->fetches() == (ipv6 ? 3 * n : 2 * n));
  }
}
