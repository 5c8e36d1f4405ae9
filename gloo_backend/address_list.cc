#include "gloo_backend/address_list.h"

#include <sys/socket.h>
#include <netinet/in.h>

#include <cstring>

#include "rendezvous/error.h"

namespace hvd::gloo_backend {

namespace {

constexpr size_t kSockaddrStorageBytes = 128;
constexpr size_t kSequenceOffset = kSockaddrStorageBytes;  // in a Gloo address
constexpr size_t kPortOffset = 2;  // sin_port and sin6_port both follow the 2-byte family
constexpr size_t kMaxSockaddr = 28;
// Header fields.
constexpr size_t kCountAt = 4, kOwnAt = 8, kEntryAt = 12, kSequenceAt = 16, kSockaddrAt = 24;

static_assert(sizeof(sockaddr_storage) == kSockaddrStorageBytes);
static_assert(offsetof(sockaddr_in, sin_port) == kPortOffset && offsetof(sockaddr_in6, sin6_port) == kPortOffset);
static_assert(sizeof(sockaddr_in6) == kMaxSockaddr && kSockaddrAt + kMaxSockaddr == kAddressListHeaderBytes);

void putLE(char* at, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) at[i] = static_cast<char>(v >> (8 * i));
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

}  // namespace

std::vector<char> encodeAddressList(const std::vector<std::vector<char>>& by_rank, size_t own) {
  const size_t n = by_rank.size();
  HVD_INTERNAL_ASSERT(own < n, "own rank ", own, " of a scope of ", n);
  const size_t first = own == 0 ? 1 : 0;  // the first peer
  const std::vector<char>* base = first < n ? &by_rank[first] : nullptr;
  const size_t length = base ? sockaddrLength(*base) : 0;
  bool sequence = length > 0 && sequenceOf(*base) != -1, ports = length > 0;
  for (size_t r = 0, p = 0; r < n && (sequence || ports); ++r) {
    if (r == own) continue;
    const auto& a = by_rank[r];
    if (sockaddrLength(a) != length) {
      sequence = ports = false;
      break;
    }
    sequence = sequence && sameSockaddr(a, *base, length, false) &&
               sequenceOf(a) == sequenceOf(*base) + static_cast<int64_t>(p);
    ports = ports && sameSockaddr(a, *base, length, true) && sequenceOf(a) == sequenceOf(*base);
    ++p;
  }
  const AddressListShape shape = sequence ? AddressListShape::kSequence
                                 : ports  ? AddressListShape::kPorts
                                          : AddressListShape::kFull;
  size_t entry = shape == AddressListShape::kSequence ? 0 : shape == AddressListShape::kPorts ? 2 : 0;
  if (shape == AddressListShape::kFull && base) entry = base->size();
  std::vector<char> out(kAddressListHeaderBytes + n * entry, 0);
  out[0] = static_cast<char>(kAddressListMagic);
  out[1] = static_cast<char>(kAddressListVersion);
  out[2] = static_cast<char>(shape);
  putLE(out.data() + kCountAt, n, 4);
  putLE(out.data() + kOwnAt, own, 4);
  putLE(out.data() + kEntryAt, entry, 4);
  if (shape != AddressListShape::kFull) {
    out[3] = static_cast<char>(length);
    putLE(out.data() + kSequenceAt, static_cast<uint64_t>(sequenceOf(*base)), 8);
    std::memcpy(out.data() + kSockaddrAt, base->data(), length);
    if (shape == AddressListShape::kPorts) out[kSockaddrAt + kPortOffset] = out[kSockaddrAt + kPortOffset + 1] = 0;
  }
  if (shape == AddressListShape::kSequence) return out;
  for (size_t r = 0; r < n; ++r) {
    if (r == own) continue;
    const auto& a = by_rank[r];
    char* at = out.data() + kAddressListHeaderBytes + r * entry;
    if (shape == AddressListShape::kPorts) {
      std::memcpy(at, a.data() + kPortOffset, 2);
    } else {
      HVD_INTERNAL_ASSERT(a.size() == entry, "Gloo pair addresses of different sizes: ", a.size(), " and ", entry);
      std::memcpy(at, a.data(), entry);
    }
  }
  return out;
}

AddressListHeader::AddressListHeader(std::string_view header, std::string where) : where_(std::move(where)) {
  const auto bad = [&](const std::string& what) {
    throw StoreError(detail::concat("malformed Gloo address list at ", where_, ": ", what));
  };
  const char* data = header.data();
  if (header.size() >= 1 && static_cast<uint8_t>(data[0]) != kAddressListMagic) {
    bad(detail::concat("first byte ", static_cast<int>(static_cast<uint8_t>(data[0])), ", not the magic ",
                       static_cast<int>(kAddressListMagic), " (a peer of another version?)"));
  }
  if (header.size() >= 2 && static_cast<uint8_t>(data[1]) != kAddressListVersion) {
    bad(detail::concat("version ", static_cast<int>(static_cast<uint8_t>(data[1])), ", this build reads version ",
                       static_cast<int>(kAddressListVersion)));
  }
  if (header.size() < kAddressListHeaderBytes) {
    bad(detail::concat(header.size(), " bytes, shorter than the ", kAddressListHeaderBytes, "-byte header"));
  }
  const auto shape = static_cast<uint8_t>(data[2]);
  if (shape > static_cast<uint8_t>(AddressListShape::kPorts)) bad(detail::concat("unknown shape ", static_cast<int>(shape)));
  shape_ = static_cast<AddressListShape>(shape);
  count_ = getLE(data + kCountAt, 4);
  own_ = getLE(data + kOwnAt, 4);
  entry_ = getLE(data + kEntryAt, 4);
  if (own_ >= count_) bad(detail::concat("own rank ", own_, " in a scope of ", count_));
  if (shape_ == AddressListShape::kFull) {
    if (entry_ == 0 && count_ > 1) bad("entries of 0 bytes in a full list");
    return;
  }
  const size_t expected_entry = shape_ == AddressListShape::kPorts ? 2 : 0;
  if (entry_ != expected_entry) {
    bad(detail::concat("entries of ", entry_, " bytes where shape ", static_cast<int>(shape), " has ", expected_entry));
  }
  sockaddr_length_ = static_cast<uint8_t>(data[3]);
  sa_family_t family = 0;
  std::memcpy(&family, data + kSockaddrAt, sizeof family);
  const size_t most = family == AF_INET ? sizeof(sockaddr_in) : family == AF_INET6 ? sizeof(sockaddr_in6) : 0;
  if (most == 0 || sockaddr_length_ != most) {
    bad(detail::concat("sockaddr of ", sockaddr_length_, " bytes with family ", family, ", not an IPv4 (", AF_INET,
                       ", ", sizeof(sockaddr_in), " bytes) or IPv6 (", AF_INET6, ", ", sizeof(sockaddr_in6),
                       " bytes) address"));
  }
  std::memcpy(sockaddr_, data + kSockaddrAt, sockaddr_length_);
  sequence_ = static_cast<int64_t>(getLE(data + kSequenceAt, 8));
}

std::vector<char> AddressListHeader::address(size_t r, std::string_view entry) const {
  HVD_INTERNAL_ASSERT(r < count_ && r != own_, "address ", r, " of a list of ", count_, " published by rank ", own_,
                      " at ", where_);
  if (entry.size() != entry_) {
    throw StoreError(detail::concat("malformed Gloo address list at ", where_, ": the entry of rank ", r, " is ",
                                    entry.size(), " bytes, not ", entry_, " (the value is cut short)"));
  }
  if (shape_ == AddressListShape::kFull) return std::vector<char>(entry.begin(), entry.end());
  std::vector<char> out(kGlooAddressBytes, 0);
  std::memcpy(out.data(), sockaddr_, sockaddr_length_);
  int64_t sequence = sequence_;
  if (shape_ == AddressListShape::kPorts) {
    std::memcpy(out.data() + kPortOffset, entry.data(), 2);
  } else {
    sequence += static_cast<int64_t>(r < own_ ? r : r - 1);  // pairs were created in rank order, own skipped
  }
  putLE(out.data() + kSequenceOffset, static_cast<uint64_t>(sequence), 8);
  return out;
}

AddressList::AddressList(const char* data, size_t size, std::string where)
    : data_(data), header_(std::string_view(data, size), std::move(where)) {
  const size_t expected = header_.entryOffset(header_.size());
  if (size != expected) {
    throw StoreError(detail::concat("malformed Gloo address list at ", header_.where(), ": ", size, " bytes where ",
                                    header_.size(), " entries of ", header_.entryBytes(), " take ", expected));
  }
}

std::vector<char> AddressList::at(size_t r) const {
  const size_t at = header_.entryOffset(r);
  return header_.address(r, std::string_view(data_ + at, header_.entryBytes()));
}

}  // namespace hvd::gloo_backend
