#include "gloo_backend/address_list.h"

#include <sys/socket.h>
#include <netinet/in.h>

#include <cstdint>
#include <cstring>

#include "base/error.h"

namespace hvd::gloo_backend {

namespace {

constexpr size_t kSockaddrStorageBytes = 128;
constexpr size_t kSequenceOffset = kSockaddrStorageBytes;  // in a Gloo address
constexpr size_t kPortOffset = 2;  // sin_port and sin6_port both follow the 2-byte family
// Header fields (address_list.h).
constexpr size_t kFamilyAt = 3, kCountAt = 4, kSequenceAt = 8, kPortAt = 12, kEntryAt = 14, kAddressAt = 16,
                 kFlowinfoAt = 32, kScopeIdAt = 36, kOwnAt = 40;
// Family codes.
constexpr uint8_t kNoFamily = 0, kIPv4 = 4, kIPv6 = 6;

static_assert(sizeof(sockaddr_storage) == kSockaddrStorageBytes);
static_assert(offsetof(sockaddr_in, sin_port) == kPortOffset && offsetof(sockaddr_in6, sin6_port) == kPortOffset);
// The IPv4 address ends the peer prefix; the IPv6 address runs on past it, then flowinfo and scope id.
static_assert(kAddressAt + sizeof(in_addr) == kAddressListPeerBytes);
static_assert(kAddressAt + sizeof(in6_addr) == kFlowinfoAt && kFlowinfoAt + 4 == kScopeIdAt && kScopeIdAt + 4 == kOwnAt);
static_assert(kOwnAt + 4 == kAddressListHeaderBytes);
static_assert(sizeof(sockaddr_in6::sin6_flowinfo) == 4 && sizeof(sockaddr_in6::sin6_scope_id) == 4);

void putLE(char* at, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) at[i] = static_cast<char>(v >> (8 * i));
}
uint64_t getLE(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

int64_t sequenceOf(const std::vector<char>& a) { return static_cast<int64_t>(getLE(a.data() + kSequenceOffset, 8)); }

// The family code of an address that the compact shapes can carry (its sockaddr rebuilt from the header's
// fields equals the original), or kNoFamily.
uint8_t familyCode(const std::vector<char>& a) {
  if (a.size() != kGlooAddressBytes) return kNoFamily;
  sa_family_t family;
  std::memcpy(&family, a.data(), sizeof family);
  if (family == AF_INET6) return kIPv6;
  if (family != AF_INET) return kNoFamily;
  sockaddr_in sin;
  std::memcpy(&sin, a.data(), sizeof sin);
  for (const unsigned char c : sin.sin_zero) {
    if (c != 0) return kNoFamily;  // not carried
  }
  return kIPv4;
}

size_t sockaddrLength(uint8_t code) { return code == kIPv4 ? sizeof(sockaddr_in) : sizeof(sockaddr_in6); }

bool sameSockaddr(const std::vector<char>& a, const std::vector<char>& b, size_t length, bool but_port) {
  if (!but_port) return std::memcmp(a.data(), b.data(), length) == 0;
  return std::memcmp(a.data(), b.data(), kPortOffset) == 0 &&
         std::memcmp(a.data() + kPortOffset + 2, b.data() + kPortOffset + 2, length - kPortOffset - 2) == 0;
}

bool fitsI32(int64_t v) { return v >= INT32_MIN && v <= INT32_MAX; }

}  // namespace

std::vector<char> encodeAddressList(const std::vector<std::vector<char>>& by_rank, size_t own) {
  const size_t n = by_rank.size();
  HVD_INTERNAL_ASSERT(own < n && n <= UINT32_MAX, "own rank ", own, " of a scope of ", n);
  const size_t first = own == 0 ? 1 : 0;  // the first peer
  const std::vector<char>* base = first < n ? &by_rank[first] : nullptr;
  // The family first: only an address of Gloo's size has a sequence number to read.
  const uint8_t code = base && familyCode(*base) != kNoFamily && fitsI32(sequenceOf(*base)) ? familyCode(*base)
                                                                                             : kNoFamily;
  const size_t length = code == kNoFamily ? 0 : sockaddrLength(code);
  bool sequence = length > 0 && sequenceOf(*base) != -1, ports = length > 0;
  for (size_t r = 0, p = 0; r < n && (sequence || ports); ++r) {
    if (r == own) continue;
    const auto& a = by_rank[r];
    if (familyCode(a) != code) {
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
  HVD_INTERNAL_ASSERT(entry <= UINT16_MAX, "a Gloo pair address of ", entry, " bytes");
  std::vector<char> out(kAddressListHeaderBytes + n * entry, 0);
  out[0] = static_cast<char>(kAddressListMagic);
  out[1] = static_cast<char>(kAddressListVersion);
  out[2] = static_cast<char>(shape);
  putLE(out.data() + kCountAt, n, 4);
  putLE(out.data() + kEntryAt, entry, 2);
  putLE(out.data() + kOwnAt, own, 4);
  if (shape != AddressListShape::kFull) {
    out[kFamilyAt] = static_cast<char>(code);
    putLE(out.data() + kSequenceAt, static_cast<uint64_t>(sequenceOf(*base)), 4);
    const char* sa = base->data();
    if (shape == AddressListShape::kSequence) std::memcpy(out.data() + kPortAt, sa + kPortOffset, 2);
    if (code == kIPv4) {
      std::memcpy(out.data() + kAddressAt, sa + offsetof(sockaddr_in, sin_addr), sizeof(in_addr));
    } else {
      std::memcpy(out.data() + kAddressAt, sa + offsetof(sockaddr_in6, sin6_addr), sizeof(in6_addr));
      std::memcpy(out.data() + kFlowinfoAt, sa + offsetof(sockaddr_in6, sin6_flowinfo), 4);
      std::memcpy(out.data() + kScopeIdAt, sa + offsetof(sockaddr_in6, sin6_scope_id), 4);
    }
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

AddressListHeader::AddressListHeader(std::string_view bytes, size_t publisher, std::string where)
    : where_(std::move(where)) {
  parse(bytes, &publisher);
}

AddressListHeader::AddressListHeader(std::string_view header, std::string where) : where_(std::move(where)) {
  parse(header, nullptr);
}

bool AddressListHeader::needsFullHeader(std::string_view prefix) {
  return prefix.size() > kFamilyAt && static_cast<uint8_t>(prefix[0]) == kAddressListMagic &&
         static_cast<uint8_t>(prefix[1]) == kAddressListVersion && static_cast<uint8_t>(prefix[kFamilyAt]) == kIPv6;
}

void AddressListHeader::parse(std::string_view bytes, const size_t* publisher) {
  const auto bad = [&](const std::string& what) {
    throw StoreError(detail::concat("malformed Gloo address list at ", where_, ": ", what));
  };
  const char* data = bytes.data();
  if (bytes.size() >= 1 && static_cast<uint8_t>(data[0]) != kAddressListMagic) {
    bad(detail::concat("first byte ", static_cast<int>(static_cast<uint8_t>(data[0])), ", not the magic ",
                       static_cast<int>(kAddressListMagic), " (a peer of another version?)"));
  }
  if (bytes.size() >= 2 && static_cast<uint8_t>(data[1]) != kAddressListVersion) {
    bad(detail::concat("version ", static_cast<int>(static_cast<uint8_t>(data[1])), ", this build reads version ",
                       static_cast<int>(kAddressListVersion)));
  }
  if (!publisher && bytes.size() < kAddressListHeaderBytes) {
    bad(detail::concat(bytes.size(), " bytes, shorter than the ", kAddressListHeaderBytes, "-byte header"));
  }
  if (bytes.size() < kAddressListPeerBytes) {
    bad(detail::concat(bytes.size(), " bytes, shorter than the ", kAddressListPeerBytes, "-byte peer prefix"));
  }
  const bool whole = bytes.size() >= kAddressListHeaderBytes;
  const auto shape = static_cast<uint8_t>(data[2]);
  if (shape > static_cast<uint8_t>(AddressListShape::kPorts)) bad(detail::concat("unknown shape ", static_cast<int>(shape)));
  shape_ = static_cast<AddressListShape>(shape);
  const auto code = static_cast<uint8_t>(data[kFamilyAt]);
  count_ = getLE(data + kCountAt, 4);
  entry_ = getLE(data + kEntryAt, 2);
  if (whole) {
    own_ = getLE(data + kOwnAt, 4);
    if (own_ >= count_) bad(detail::concat("own rank ", own_, " in a scope of ", count_));
    if (publisher && own_ != *publisher) {
      bad(detail::concat("published by rank ", own_, ", read from rank ", *publisher, "'s key (a peer of another job?)"));
    }
  } else {
    own_ = *publisher;
    if (own_ >= count_) {
      bad(detail::concat("read from rank ", own_, "'s key, published for a scope of ", count_,
                         " (a peer of another job?)"));
    }
  }
  if (shape_ == AddressListShape::kFull) {
    if (code != kNoFamily) bad(detail::concat("family code ", static_cast<int>(code), " in a full list"));
    if (entry_ == 0 && count_ > 1) bad("entries of 0 bytes in a full list");
    return;
  }
  const size_t expected_entry = shape_ == AddressListShape::kPorts ? 2 : 0;
  if (entry_ != expected_entry) {
    bad(detail::concat("entries of ", entry_, " bytes where shape ", static_cast<int>(shape), " has ", expected_entry));
  }
  if (code != kIPv4 && code != kIPv6) {
    bad(detail::concat("family code ", static_cast<int>(code), ", not ", static_cast<int>(kIPv4), " (IPv4) or ",
                       static_cast<int>(kIPv6), " (IPv6)"));
  }
  if (code == kIPv6 && !whole) {
    bad(detail::concat("an IPv6 list read from its first ", bytes.size(), " bytes: its address needs the whole ",
                       kAddressListHeaderBytes, "-byte header"));
  }
  sockaddr_length_ = sockaddrLength(code);
  std::memset(sockaddr_, 0, sizeof sockaddr_);
  if (code == kIPv4) {
    sockaddr_in sin{};
    sin.sin_family = AF_INET;
    std::memcpy(&sin.sin_port, data + kPortAt, 2);
    std::memcpy(&sin.sin_addr, data + kAddressAt, sizeof sin.sin_addr);
    std::memcpy(sockaddr_, &sin, sizeof sin);
  } else {
    sockaddr_in6 sin6{};
    sin6.sin6_family = AF_INET6;
    std::memcpy(&sin6.sin6_port, data + kPortAt, 2);
    std::memcpy(&sin6.sin6_addr, data + kAddressAt, sizeof sin6.sin6_addr);
    std::memcpy(&sin6.sin6_flowinfo, data + kFlowinfoAt, 4);
    std::memcpy(&sin6.sin6_scope_id, data + kScopeIdAt, 4);
    std::memcpy(sockaddr_, &sin6, sizeof sin6);
  }
  sequence_ = static_cast<int32_t>(static_cast<uint32_t>(getLE(data + kSequenceAt, 4)));
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
