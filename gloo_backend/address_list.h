// The value a rank publishes at <scope>/<rank>: the Gloo TCP addresses of its pairs, laid out so that a
// peer can read only what it needs with a sliced multi-key fetch (Store::waitAndGet with a ValueRange):
// a fixed-size header, the same size in every shape, then one fixed-size entry per rank of the scope,
// indexed by absolute rank (the publisher's own entry is present, zero and ignored). Rank r's entry in
// every list is at kAddressListHeaderBytes + r * entry_bytes, so rank r reads every header with one range
// (the same on every rank: the server builds that answer once) and its own column with another.
//
// A Gloo tcp::Address is 136 bytes (tcp/address.h): a sockaddr_storage (128) and a sequence number (an
// ssize_t, -1 when unset). What the addresses of one rank's pairs share depends on the Gloo build:
//   - A Gloo with one listening socket per device (a tcp::Listener; not the Debian build) gives every pair
//     the device's address and the next sequence number in the order the pairs were created (rank order,
//     the publisher's own skipped): shape kSequence, entries of 0 bytes.
//   - Debian's Gloo (libgloo-dev 0.0~git20220518) listens once per pair: each pair has its own port,
//     picked by the kernel, and the sequence number is unset. Shape kPorts: entries of 2 bytes (the port,
//     network order, as in the sockaddr).
//   - Anything else (a family other than IPv4/IPv6, mixed families or hosts, another size): kFull, each
//     entry the address byte for byte.
// In the compact shapes only the family's sockaddr (its fields: family, port, address, and for IPv6 the
// flowinfo and scope id) and the sequence number travel; the rest of the sockaddr_storage is padding that
// getsockname() leaves as it found it (uninitialized in Gloo's Address::fromSockName) and that
// Pair::connect never reads (it connects with the family's length). The decoder writes zeros there.
// kFull keeps every byte.
//
// Header (kAddressListHeaderBytes = 44 bytes, integers little-endian), version 3. Its first
// kAddressListPeerBytes = 20 bytes, the peer prefix, hold everything a peer needs to decode its entry when
// the family is IPv4 or the shape is kFull, so connect() fetches only those 20 bytes of every rank's
// header (N^2 x 21 bytes in all instead of N^2 x 53 with version 2's 52-byte header read whole):
//    0 u8 magic 0xA7         1 u8 version 3     2 u8 shape     3 u8 family code (0: kFull, 4: IPv4, 6: IPv6)
//    4 u32 count (ranks in the scope)
//    8 i32 sequence number (kSequence: the first pair's; kPorts: every pair's; kFull: 0)
//   12 u16 port, raw as in the sockaddr (network order): kSequence's; 0 for kPorts and kFull
//   14 u16 entry bytes
//   16 4 bytes: the IPv4 address (raw sin_addr) or the first 4 bytes of sin6_addr; 0 for kFull
// then, beyond the prefix:
//   20 12 bytes: the rest of sin6_addr   32 4 bytes: sin6_flowinfo   36 4 bytes: sin6_scope_id
//      (raw as in the sockaddr; zero for IPv4 and kFull)
//   40 u32 the publisher's own rank
// The own rank is not in the prefix: a peer knows it, it is the rank of the key it read. The sequence number
// travels as an i32 (4 bytes of the prefix saved); an address whose sequence number does not fit is encoded
// kFull. The decoder rebuilds the canonical address from the family code: the
// family's sockaddr (family, port, address; IPv6 also flowinfo and scope id), zeros in the rest of the
// sockaddr_storage, the sequence number as an i64 at offset 128. An IPv4 sockaddr whose sin_zero is not
// zero would not survive that, so it is encoded kFull too.
//
// Reading a header: AddressListHeader(bytes, publisher, where) takes the peer prefix, or the whole header
// (then the own-rank field is checked against publisher), and refuses an IPv6 list given only the prefix;
// AddressListHeader::needsFullHeader(prefix) says beforehand whether a prefix is of such a list.
// AddressListHeader(header, where) takes the whole header and reads the publisher's rank from it.
// Errors: a malformed value is a StoreError of one line naming `where` (the store key) and what is wrong.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace hvd::gloo_backend {

inline constexpr uint8_t kAddressListMagic = 0xA7;
inline constexpr uint8_t kAddressListVersion = 3;
// The whole header, the same in every shape and family: entries start here.
inline constexpr size_t kAddressListHeaderBytes = 44;
// Its first bytes, all a peer reads of an IPv4 or kFull list (see above).
inline constexpr size_t kAddressListPeerBytes = 20;
// sizeof(gloo::transport::tcp::Address::Impl): sockaddr_storage + ssize_t.
inline constexpr size_t kGlooAddressBytes = 136;

enum class AddressListShape : uint8_t { kFull = 0, kSequence = 1, kPorts = 2 };

// Encodes by_rank (by_rank[r]: the bytes of the Gloo tcp::Address of the pair to rank r; by_rank[own] is
// ignored) in the smallest shape that holds them.
std::vector<char> encodeAddressList(const std::vector<std::vector<char>>& by_rank, size_t own);

// A parsed (validated) header: the peer prefix or the whole header of a value. Copies what it needs.
class AddressListHeader {
 public:
  // bytes: the value's first kAddressListPeerBytes or more. publisher: the rank whose key it was read from
  // (the prefix does not hold it; kSequence's decoding needs it). With kAddressListHeaderBytes or more the
  // whole header is parsed and its own-rank field must equal publisher; with fewer only the prefix is, and an
  // IPv6 list is refused (its address does not fit in the prefix: see needsFullHeader). Throws StoreError
  // "malformed Gloo address list at <where>: <what>" for anything that is not a header of this layout (a
  // value cut short, a publisher outside the scope or other than the own-rank field included).
  AddressListHeader(std::string_view bytes, size_t publisher, std::string where);
  // The whole header (kAddressListHeaderBytes or more); the publisher's rank is read from it.
  AddressListHeader(std::string_view header, std::string where);

  // Whether the value whose prefix this is must be read with its whole header: its first bytes are of this
  // layout and version and name IPv6. False for anything else (the constructor then parses the prefix alone
  // or says what is wrong with it).
  static bool needsFullHeader(std::string_view prefix);

  AddressListShape shape() const { return shape_; }
  size_t size() const { return count_; }         // ranks, the publisher's own included
  size_t own() const { return own_; }            // the publisher's rank (given, or read from the whole header)
  size_t entryBytes() const { return entry_; }
  // Where rank r's entry lies in the value (r < size()).
  size_t entryOffset(size_t r) const { return kAddressListHeaderBytes + r * entry_; }
  // The address of the publisher's pair to rank r (r < size(), r != own()) from its entry (entryBytes()
  // bytes): the exact bytes for kFull, the canonical 136 bytes otherwise. StoreError when the entry is
  // not entryBytes() long (the value was cut short).
  std::vector<char> address(size_t r, std::string_view entry) const;
  const std::string& where() const { return where_; }

 private:
  // publisher: given, or read from the whole header when absent.
  void parse(std::string_view bytes, const size_t* publisher);

  std::string where_;
  AddressListShape shape_ = AddressListShape::kFull;
  size_t count_ = 0, own_ = 0, entry_ = 0;
  size_t sockaddr_length_ = 0;
  char sockaddr_[28] = {};  // the family's sockaddr, port zero for kPorts
  int64_t sequence_ = 0;
};

// A whole value: its header and every entry. A view: data must outlive it.
class AddressList {
 public:
  // Throws StoreError as AddressListHeader does, and when the value's size is not header + entries.
  AddressList(const char* data, size_t size, std::string where);

  const AddressListHeader& header() const { return header_; }
  size_t size() const { return header_.size(); }
  AddressListShape shape() const { return header_.shape(); }
  // The address of the pair to rank r (r != the publisher's own rank).
  std::vector<char> at(size_t r) const;

 private:
  const char* data_;
  AddressListHeader header_;
};

}  // namespace hvd::gloo_backend
