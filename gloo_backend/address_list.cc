#include "gloo_backend/address_list.h"

#include <sys/socket.h>
#include <netinet/in.h>

#include <cstring>

#include "rendezvous/error.h"

namespace hvd::gloo_backend {

namespace {

constexpr size_t kHeaderBytes = 7;          // magic, version, shape, u32 count
constexpr size_t kSockaddrStorageBytes = 128;
constexpr size_t kSequenceOffset = kSockaddrStorageBytes;
constexpr size_t kPortOffset = 2;           // sin_port and sin6_port both follow the 2-byte family

static_assert(sizeof(sockaddr_storage) == kSockaddrStorageBytes);
static_assert(offsetof(sockaddr_in, sin_port) == kPortOffset && offsetof(sockaddr_in6, sin6_port) == kPortOffset);

void putU32(std::vector<char>& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
}
void putI64(std::vector<char>& out, int64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(static_cast<uint64_t>(v) >> (8 * i)));
}
uint64_t getLE(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

int64_t sequenceOf(const std::vector<char>& a) { return static_cast<int64_t>(getLE(a.data() + kSequenceOffset, 8)); }

// The length of the family's sockaddr, or 0 when the address cannot be encoded compactly.
size_t sockaddrLength(const std::vector<char>& a) {
  if (a.size() != kGlooAddressBytes) return 0;
  sa_family_t family;
  std::memcpy(&family, a.data(), sizeof family);
  if (family == AF_INET) return sizeof(sockaddr_in);
  if (family == AF_INET6) return sizeof(sockaddr_in6);
  return 0;
}

bool sameSockaddr(const std::vector<char>& a, const std::vector<char>& b, size_t length, bool but_port) {
  if (!but_port) return std::memcmp(a.data(), b.data(), length) == 0;
  return std::memcmp(a.data(), b.data(), kPortOffset) == 0 &&
         std::memcmp(a.data() + kPortOffset + 2, b.data() + kPortOffset + 2, length - kPortOffset - 2) == 0;
}

std::vector<char> header(AddressListShape shape, size_t count) {
  std::vector<char> out = {static_cast<char>(kAddressListMagic), static_cast<char>(kAddressListVersion),
                           static_cast<char>(shape)};
  putU32(out, static_cast<uint32_t>(count));
  return out;
}

}  // namespace

std::vector<char> encodeAddressList(const std::vector<std::vector<char>>& addresses) {
  const size_t n = addresses.size();
  const size_t length = n ? sockaddrLength(addresses[0]) : 0;
  bool sequence = length > 0, ports = length > 0;
  for (size_t i = 0; i < n && (sequence || ports); ++i) {
    const auto& a = addresses[i];
    if (sockaddrLength(a) != length) {
      sequence = ports = false;
      break;
    }
    sequence = sequence && sameSockaddr(a, addresses[0], length, false) &&
               sequenceOf(addresses[0]) != -1 && sequenceOf(a) == sequenceOf(addresses[0]) + static_cast<int64_t>(i);
    ports = ports && sameSockaddr(a, addresses[0], length, true) && sequenceOf(a) == sequenceOf(addresses[0]);
  }
  if (sequence || ports) {
    std::vector<char> out = header(sequence ? AddressListShape::kSequence : AddressListShape::kPorts, n);
    std::vector<char> common(addresses[0].begin(), addresses[0].begin() + length);
    if (!sequence) common[kPortOffset] = common[kPortOffset + 1] = 0;
    // Trailing zeros (sin_zero, an IPv6 scope id of 0) are implied by the length.
    while (common.size() > sizeof(sa_family_t) && common.back() == 0) common.pop_back();
    out.push_back(static_cast<char>(common.size()));
    out.insert(out.end(), common.begin(), common.end());
    putI64(out, sequenceOf(addresses[0]));
    if (!sequence) {
      out.reserve(out.size() + 2 * n);
      for (const auto& a : addresses) out.insert(out.end(), a.begin() + kPortOffset, a.begin() + kPortOffset + 2);
    }
    return out;
  }
  std::vector<char> out = header(AddressListShape::kFull, n);
  const size_t each = n ? addresses[0].size() : 0;
  putU32(out, static_cast<uint32_t>(each));
  out.reserve(out.size() + n * each);
  for (const auto& a : addresses) {
    HVD_INTERNAL_ASSERT(a.size() == each, "Gloo pair addresses of different sizes: ", a.size(), " and ", each);
    out.insert(out.end(), a.begin(), a.end());
  }
  return out;
}

AddressList::AddressList(const char* data, size_t size, std::string where) : data_(data), where_(std::move(where)) {
  const auto bad = [&](const std::string& what) {
    throw StoreError(detail::concat("malformed Gloo address list at ", where_, ": ", what));
  };
  if (size < kHeaderBytes) bad(detail::concat(size, " bytes, shorter than the ", kHeaderBytes, "-byte header"));
  if (static_cast<uint8_t>(data[0]) != kAddressListMagic) {
    bad(detail::concat("first byte ", static_cast<int>(static_cast<uint8_t>(data[0])), ", not the magic ",
                       static_cast<int>(kAddressListMagic), " (a peer of another version?)"));
  }
  if (static_cast<uint8_t>(data[1]) != kAddressListVersion) {
    bad(detail::concat("version ", static_cast<int>(static_cast<uint8_t>(data[1])), ", this build reads version ",
                       static_cast<int>(kAddressListVersion)));
  }
  const auto shape = static_cast<uint8_t>(data[2]);
  if (shape > static_cast<uint8_t>(AddressListShape::kPorts)) bad(detail::concat("unknown shape ", static_cast<int>(shape)));
  shape_ = static_cast<AddressListShape>(shape);
  count_ = getLE(data + 3, 4);
  size_t at = kHeaderBytes;
  size_t expected = 0;
  if (shape_ == AddressListShape::kFull) {
    if (size < at + 4) bad(detail::concat(size, " bytes, too short for a full list's entry size"));
    each_ = getLE(data + at, 4);
    at += 4;
    if (each_ == 0 && count_ > 0) bad("entries of 0 bytes");
    if (count_ > size || each_ > size) bad(detail::concat(size, " bytes cannot hold ", count_, " entries of ", each_));
    entries_ = data + at;
    expected = at + count_ * each_;
  } else {
    if (size < at + 1) bad(detail::concat(size, " bytes, too short for a sockaddr length"));
    sockaddr_length_ = static_cast<uint8_t>(data[at++]);
    if (size < at + sockaddr_length_) bad(detail::concat(size, " bytes, too short for a sockaddr of ", sockaddr_length_));
    sa_family_t family = 0;
    if (sockaddr_length_ >= sizeof family) std::memcpy(&family, data + at, sizeof family);
    const size_t most = family == AF_INET ? sizeof(sockaddr_in) : family == AF_INET6 ? sizeof(sockaddr_in6) : 0;
    if (most == 0 || sockaddr_length_ < sizeof family || sockaddr_length_ > most) {
      bad(detail::concat("sockaddr of ", sockaddr_length_, " bytes with family ", family,
                         ", not an IPv4 (", AF_INET, ", at most ", sizeof(sockaddr_in), " bytes) or IPv6 (", AF_INET6,
                         ", at most ", sizeof(sockaddr_in6), " bytes) address"));
    }
    sockaddr_ = data + at;
    at += sockaddr_length_;
    if (size < at + 8) bad(detail::concat(size, " bytes, too short for the sequence number"));
    sequence_ = static_cast<int64_t>(getLE(data + at, 8));
    at += 8;
    ports_ = data + at;
    expected = at + (shape_ == AddressListShape::kPorts ? 2 * count_ : 0);
  }
  if (size != expected) bad(detail::concat(size, " bytes where ", count_, " entries take ", expected));
}

std::vector<char> AddressList::at(size_t i) const {
  HVD_INTERNAL_ASSERT(i < count_, "address ", i, " of a list of ", count_, " at ", where_);
  if (shape_ == AddressListShape::kFull) return std::vector<char>(entries_ + i * each_, entries_ + (i + 1) * each_);
  std::vector<char> out(kGlooAddressBytes, 0);
  std::memcpy(out.data(), sockaddr_, sockaddr_length_);
  int64_t sequence = sequence_;
  if (shape_ == AddressListShape::kPorts) {
    std::memcpy(out.data() + kPortOffset, ports_ + 2 * i, 2);
  } else {
    sequence += static_cast<int64_t>(i);
  }
  for (int b = 0; b < 8; ++b) out[kSequenceOffset + b] = static_cast<char>(static_cast<uint64_t>(sequence) >> (8 * b));
  return out;
}

}  // namespace hvd::gloo_backend
