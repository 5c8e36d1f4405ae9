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
// In the compact shapes only the family's sockaddr (16 bytes for IPv4, 28 for IPv6) and the sequence
// number travel; the rest of the sockaddr_storage is padding that getsockname() leaves as it found it
// (uninitialized in Gloo's Address::fromSockName) and that Pair::connect never reads (it connects with
// the family's length). The decoder writes zeros there. kFull keeps every byte.
//
// Header (kAddressListHeaderBytes, integers little-endian): u8 magic 0xA7, u8 version 2, u8 shape,
// u8 sockaddr length (compact shapes, else 0), u32 count (ranks in the scope), u32 own rank, u32 entry
// bytes, i64 sequence number (kSequence: the first pair's; kPorts: every pair's), 28 sockaddr bytes
// (compact shapes: the family's sockaddr, port zero for kPorts, zero-padded). Then count entries.
// Errors: a malformed value is a StoreError of one line naming `where` (the store key) and what is wrong.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace hvd::gloo_backend {

inline constexpr uint8_t kAddressListMagic = 0xA7;
inline constexpr uint8_t kAddressListVersion = 2;
inline constexpr size_t kAddressListHeaderBytes = 52;
// sizeof(gloo::transport::tcp::Address::Impl): sockaddr_storage + ssize_t.
inline constexpr size_t kGlooAddressBytes = 136;

enum class AddressListShape : uint8_t { kFull = 0, kSequence = 1, kPorts = 2 };

// Encodes by_rank (by_rank[r]: the bytes of the Gloo tcp::Address of the pair to rank r; by_rank[own] is
// ignored) in the smallest shape that holds them.
std::vector<char> encodeAddressList(const std::vector<std::vector<char>>& by_rank, size_t own);

// A parsed (validated) header: the first kAddressListHeaderBytes of a value. Copies what it needs.
class AddressListHeader {
 public:
  // Throws StoreError "malformed Gloo address list at <where>: <what>" for anything that is not a header
  // of this layout (a value cut short included).
  AddressListHeader(std::string_view header, std::string where);

  AddressListShape shape() const { return shape_; }
  size_t size() const { return count_; }         // ranks, the publisher's own included
  size_t own() const { return own_; }            // the publisher's rank
  size_t entryBytes() const { return entry_; }
  // Where rank r's entry lies in the value (r < size()).
  size_t entryOffset(size_t r) const { return kAddressListHeaderBytes + r * entry_; }
  // The address of the publisher's pair to rank r (r < size(), r != own()) from its entry (entryBytes()
  // bytes): the exact bytes for kFull, the canonical 136 bytes otherwise. StoreError when the entry is
  // not entryBytes() long (the value was cut short).
  std::vector<char> address(size_t r, std::string_view entry) const;
  const std::string& where() const { return where_; }

 private:
  std::string where_;
  AddressListShape shape_ = AddressListShape::kFull;
  size_t count_ = 0, own_ = 0, entry_ = 0;
  size_t sockaddr_length_ = 0;
  char sockaddr_[28] = {};
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
