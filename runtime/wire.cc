#include "runtime/wire.h"

#include <cstring>
#include <type_traits>

namespace hvd::runtime {
namespace {

class Writer {
 public:
  explicit Writer(MessageKind kind) { put(static_cast<uint8_t>(kind)); }

  template <typename T>
  void put(T v) {
    static_assert(std::is_trivially_copyable_v<T>);
    const auto* p = reinterpret_cast<const char*>(&v);
    out_.insert(out_.end(), p, p + sizeof v);
  }
  void put(const std::string& s) {
    put(static_cast<uint64_t>(s.size()));
    out_.insert(out_.end(), s.begin(), s.end());
  }
  template <typename T>
  void put(const std::vector<T>& v) {
    put(static_cast<uint64_t>(v.size()));
    for (const auto& x : v) put(x);
  }
  std::vector<char> take() { return std::move(out_); }

  // The field visitor (requestFields, responseFields): writes v; as<W>(v) writes v converted to W.
  template <typename T>
  void operator()(const T& v) {
    put(v);
  }
  template <typename W, typename T>
  void as(const T& v) {
    put(static_cast<W>(v));
  }

 private:
  std::vector<char> out_;
};

class Reader {
 public:
  Reader(const std::vector<char>& in, MessageKind expected, const char* what) : in_(in), what_(what) {
    HVD_CHECK(get<uint8_t>() == static_cast<uint8_t>(expected), BackendError,
              "control message is not a ", what_);
  }

  template <typename T>
  T get() {
    static_assert(std::is_trivially_copyable_v<T>);
    HVD_CHECK(pos_ + sizeof(T) <= in_.size(), BackendError, "truncated ", what_, " control message (",
              in_.size(), " bytes)");
    T v;
    std::memcpy(&v, in_.data() + pos_, sizeof v);
    pos_ += sizeof v;
    return v;
  }
  std::string getString() {
    const auto n = get<uint64_t>();
    HVD_CHECK(n <= in_.size() - pos_, BackendError, "truncated ", what_, " control message");
    std::string s(in_.data() + pos_, n);
    pos_ += n;
    return s;
  }
  template <typename T>
  std::vector<T> getVector() {
    const auto n = get<uint64_t>();
    HVD_CHECK(n <= (in_.size() - pos_) / sizeof(T) + 1, BackendError, "truncated ", what_, " control message");
    std::vector<T> v;
    v.reserve(n);
    for (uint64_t i = 0; i < n; ++i) v.push_back(get<T>());
    return v;
  }
  std::vector<std::string> getStrings() {
    const auto n = get<uint64_t>();
    HVD_CHECK(n <= in_.size() - pos_, BackendError, "truncated ", what_, " control message");
    std::vector<std::string> v;
    v.reserve(n);
    for (uint64_t i = 0; i < n; ++i) v.push_back(getString());
    return v;
  }

  // The field visitor (requestFields, responseFields): reads v; as<W>(v) reads a W and converts it.
  template <typename T>
  void operator()(T& v) {
    v = get<T>();
  }
  void operator()(std::string& v) { v = getString(); }
  void operator()(std::vector<std::string>& v) { v = getStrings(); }
  template <typename T>
  void operator()(std::vector<T>& v) {
    v = getVector<T>();
  }
  template <typename W, typename T>
  void as(T& v) {
    v = static_cast<T>(get<W>());
  }

 private:
  const std::vector<char>& in_;
  const char* what_;
  size_t pos_ = 0;
};

// Every field of a Request (R: Request, or const Request when writing) in wire order, for encode and decode
// alike, so the two cannot disagree.
template <typename IO, typename R>
void requestFields(IO& io, R& q) {
  io.template as<uint8_t>(q.type);
  io(q.name);
  io.template as<int32_t>(q.dtype);
  io.template as<int32_t>(q.op);
  io(q.prescale);
  io(q.postscale);
  io.template as<int32_t>(q.root);
  io(q.rows);
  io(q.row_elements);
  io(q.splits);
  io(q.process_set);
  io(q.group);
  io(q.group_size);
  io(q.members);
  io.template as<uint8_t>(q.has_shape);
  io(q.shape);
  io(q.device);
}

// Every field of a Response, likewise.
template <typename IO, typename S>
void responseFields(IO& io, S& s) {
  io.template as<uint8_t>(s.kind);
  io.template as<uint8_t>(s.type);
  io(s.names);
  io(s.cache_ids);
  io.template as<int32_t>(s.dtype);
  io.template as<int32_t>(s.op);
  io(s.prescale);
  io(s.postscale);
  io(s.root);
  io(s.row_elements);
  io(s.counts);
  io(s.splits);
  io(s.joined_ranks);
  io(s.last_joined_rank);
  io(s.error);
  io.template as<uint8_t>(s.error_class);
  io(s.process_set);
}

}  // namespace

bool sameDescriptor(const Request& a, const Request& b) {
  return a.type == b.type && a.dtype == b.dtype && a.op == b.op && a.prescale == b.prescale &&
         a.postscale == b.postscale && a.root == b.root && a.rows == b.rows && a.row_elements == b.row_elements &&
         a.splits == b.splits && a.process_set == b.process_set && a.group == b.group &&
         a.group_size == b.group_size && a.members == b.members && a.has_shape == b.has_shape &&
         a.shape == b.shape && a.onGpu() == b.onGpu();
}

std::vector<char> encode(const Hello& m) {
  Writer w(MessageKind::kHello);
  w.put(m.magic);
  w.put(m.nonce);
  w.put(m.rank);
  return w.take();
}

Hello decodeHello(const std::vector<char>& payload) {
  Reader r(payload, MessageKind::kHello, "hello");
  Hello m;
  m.magic = r.get<uint64_t>();
  m.nonce = r.get<uint64_t>();
  m.rank = r.get<int32_t>();
  return m;
}

std::vector<char> encode(const RequestBatch& m) {
  Writer w(MessageKind::kRequests);
  w.put(static_cast<uint8_t>(m.shutdown));
  w.put(static_cast<uint64_t>(m.requests.size()));
  for (const auto& q : m.requests) requestFields(w, q);
  w.put(m.cached);
  w.put(static_cast<uint8_t>(m.has_waiting));
  w.put(m.waiting_sets);
  w.put(m.waiting_names);
  return w.take();
}

RequestBatch decodeRequestBatch(const std::vector<char>& payload) {
  Reader r(payload, MessageKind::kRequests, "request batch");
  RequestBatch m;
  m.shutdown = r.get<uint8_t>() != 0;
  const auto n = r.get<uint64_t>();
  HVD_CHECK(n <= payload.size(), BackendError, "corrupt request batch (", n, " requests)");
  m.requests.resize(n);
  for (auto& q : m.requests) requestFields(r, q);
  m.cached = r.getVector<uint32_t>();
  m.has_waiting = r.get<uint8_t>() != 0;
  m.waiting_sets = r.getVector<int32_t>();
  m.waiting_names = r.getStrings();
  HVD_CHECK(m.waiting_sets.size() == m.waiting_names.size(), BackendError, "corrupt request batch (",
            m.waiting_sets.size(), " waiting sets, ", m.waiting_names.size(), " names)");
  return m;
}

std::vector<char> encode(const ResponseList& m) {
  Writer w(MessageKind::kResponses);
  w.put(static_cast<uint8_t>(m.shutdown));
  w.put(static_cast<uint8_t>(m.abort));
  w.put(static_cast<uint8_t>(m.peer_lost));
  w.put(m.path);
  w.put(m.shutdown_reason);
  w.put(static_cast<uint64_t>(m.responses.size()));
  for (const auto& s : m.responses) responseFields(w, s);
  return w.take();
}

ResponseList decodeResponseList(const std::vector<char>& payload) {
  Reader r(payload, MessageKind::kResponses, "response list");
  ResponseList m;
  m.shutdown = r.get<uint8_t>() != 0;
  m.abort = r.get<uint8_t>() != 0;
  m.peer_lost = r.get<uint8_t>() != 0;
  m.path = r.get<uint8_t>();
  HVD_CHECK(m.path <= ResponseList::kPathHierarchical, BackendError, "corrupt response list (path ", int{m.path}, ")");
  m.shutdown_reason = r.getString();
  const auto n = r.get<uint64_t>();
  HVD_CHECK(n <= payload.size(), BackendError, "corrupt response list (", n, " responses)");
  m.responses.resize(n);
  for (auto& s : m.responses) responseFields(r, s);
  return m;
}

}  // namespace hvd::runtime
