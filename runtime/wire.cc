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

 private:
  const std::vector<char>& in_;
  const char* what_;
  size_t pos_ = 0;
};

void putStrings(Writer& w, const std::vector<std::string>& v) {
  w.put(static_cast<uint64_t>(v.size()));
  for (const auto& s : v) w.put(s);
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
  for (const auto& q : m.requests) {
    w.put(static_cast<uint8_t>(q.type));
    w.put(q.name);
    w.put(static_cast<int32_t>(q.dtype));
    w.put(static_cast<int32_t>(q.op));
    w.put(q.prescale);
    w.put(q.postscale);
    w.put(static_cast<int32_t>(q.root));
    w.put(q.rows);
    w.put(q.row_elements);
    w.put(q.splits);
    w.put(q.process_set);
    w.put(q.group);
    w.put(q.group_size);
    w.put(q.members);
    w.put(static_cast<uint8_t>(q.has_shape));
    w.put(q.shape);
    w.put(q.device);
  }
  w.put(m.cached);
  w.put(static_cast<uint8_t>(m.has_waiting));
  w.put(m.waiting_sets);
  w.put(static_cast<uint64_t>(m.waiting_names.size()));
  for (const auto& n : m.waiting_names) w.put(n);
  return w.take();
}

RequestBatch decodeRequestBatch(const std::vector<char>& payload) {
  Reader r(payload, MessageKind::kRequests, "request batch");
  RequestBatch m;
  m.shutdown = r.get<uint8_t>() != 0;
  const auto n = r.get<uint64_t>();
  HVD_CHECK(n <= payload.size(), BackendError, "corrupt request batch (", n, " requests)");
  m.requests.resize(n);
  for (auto& q : m.requests) {
    q.type = static_cast<OpType>(r.get<uint8_t>());
    q.name = r.getString();
    q.dtype = static_cast<DataType>(r.get<int32_t>());
    q.op = static_cast<ReduceOp>(r.get<int32_t>());
    q.prescale = r.get<double>();
    q.postscale = r.get<double>();
    q.root = r.get<int32_t>();
    q.rows = r.get<int64_t>();
    q.row_elements = r.get<int64_t>();
    q.splits = r.getVector<int64_t>();
    q.process_set = r.get<int32_t>();
    q.group = r.getString();
    q.group_size = r.get<int32_t>();
    q.members = r.getVector<int32_t>();
    q.has_shape = r.get<uint8_t>() != 0;
    q.shape = r.getVector<int64_t>();
    q.device = r.get<int32_t>();
  }
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
  for (const auto& s : m.responses) {
    w.put(static_cast<uint8_t>(s.kind));
    w.put(static_cast<uint8_t>(s.type));
    putStrings(w, s.names);
    w.put(s.cache_ids);
    w.put(static_cast<int32_t>(s.dtype));
    w.put(static_cast<int32_t>(s.op));
    w.put(s.prescale);
    w.put(s.postscale);
    w.put(s.root);
    w.put(s.row_elements);
    w.put(s.counts);
    w.put(s.splits);
    w.put(s.joined_ranks);
    w.put(s.last_joined_rank);
    w.put(s.error);
    w.put(static_cast<uint8_t>(s.error_class));
    w.put(s.process_set);
  }
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
  for (auto& s : m.responses) {
    s.kind = static_cast<Response::Kind>(r.get<uint8_t>());
    s.type = static_cast<OpType>(r.get<uint8_t>());
    s.names = r.getStrings();
    s.cache_ids = r.getVector<uint32_t>();
    s.dtype = static_cast<DataType>(r.get<int32_t>());
    s.op = static_cast<ReduceOp>(r.get<int32_t>());
    s.prescale = r.get<double>();
    s.postscale = r.get<double>();
    s.root = r.get<int32_t>();
    s.row_elements = r.get<int64_t>();
    s.counts = r.getVector<int64_t>();
    s.splits = r.getVector<int64_t>();
    s.joined_ranks = r.getVector<int32_t>();
    s.last_joined_rank = r.get<int32_t>();
    s.error = r.getString();
    s.error_class = static_cast<Response::ErrorClass>(r.get<uint8_t>());
    s.process_set = r.get<int32_t>();
  }
  return m;
}

}  // namespace hvd::runtime
