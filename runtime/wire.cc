#include "runtime/wire.h"

#include <cstring>
#include <type_traits>

namespace hvd::runtime {
namespace {

class Writer {
 public:
  explicit Writer(MessageKind kind) {
    out_.reserve(256);  // most messages: one or a few operations, written without growing
    put(static_cast<uint8_t>(kind));
  }

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

  // The field visitor (requestFields, responseFields): writes each v in order; as<W>(v) writes v
  // converted to W.
  template <typename... T>
  void operator()(const T&... v) {
    (put(v), ...);
  }
  template <typename W, typename... T>
  void as(const T&... v) {
    (put(static_cast<W>(v)), ...);
  }
  // A count, then each element's fields(*this, element). `noun` names the elements in decode errors.
  template <typename T, typename Fields>
  void items(const std::vector<T>& v, const char* /*noun*/, Fields fields) {
    put(static_cast<uint64_t>(v.size()));
    for (const auto& x : v) fields(*this, x);
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

  // The field visitor (requestFields, responseFields): reads each v in order; as<W>(v) reads a W and
  // converts it.
  template <typename... T>
  void operator()(T&... v) {
    (read(v), ...);
  }
  template <typename W, typename... T>
  void as(T&... v) {
    ((v = static_cast<T>(get<W>())), ...);
  }
  template <typename T, typename Fields>
  void items(std::vector<T>& v, const char* noun, Fields fields) {
    const auto n = get<uint64_t>();
    HVD_CHECK(n <= in_.size() - pos_, BackendError, "corrupt ", what_, " (", n, " ", noun, ")");
    v.resize(n);
    for (auto& x : v) fields(*this, x);
  }

 private:
  template <typename T>
  void read(T& v) {
    v = get<T>();
  }
  void read(std::string& v) { v = getString(); }
  void read(std::vector<std::string>& v) { v = getStrings(); }
  template <typename T>
  void read(std::vector<T>& v) {
    v = getVector<T>();
  }

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
  io.template as<int32_t>(q.dtype, q.op);
  io(q.prescale, q.postscale);
  io.template as<int32_t>(q.root);
  io(q.rows, q.row_elements, q.splits, q.process_set, q.group, q.group_size, q.members);
  io.template as<uint8_t>(q.has_shape);
  io(q.shape, q.device);
}

// Every field of a Response, likewise.
template <typename IO, typename S>
void responseFields(IO& io, S& s) {
  io.template as<uint8_t>(s.kind, s.type);
  io(s.names, s.cache_ids);
  io.template as<int32_t>(s.dtype, s.op);
  io(s.prescale, s.postscale, s.root, s.row_elements, s.counts, s.splits, s.joined_ranks, s.last_joined_rank,
     s.error);
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

namespace {

// Every field of each message in wire order, for encode and decode alike (M: the message, const when
// writing).
template <typename IO, typename M>
void helloFields(IO& io, M& m) {
  io(m.magic, m.nonce, m.rank);
  io.template as<uint8_t>(m.rings);
}

template <typename IO, typename M>
void requestBatchFields(IO& io, M& m) {
  io.template as<uint8_t>(m.shutdown);
  io.items(m.requests, "requests", [](auto& visit, auto& q) { requestFields(visit, q); });
  io(m.cached);
  io.template as<uint8_t>(m.has_waiting);
  io(m.waiting_sets, m.waiting_names);
}

template <typename IO, typename M>
void responseListFields(IO& io, M& m) {
  io.template as<uint8_t>(m.shutdown, m.abort, m.peer_lost);
  io(m.path, m.shutdown_reason);
  io.items(m.responses, "responses", [](auto& visit, auto& s) { responseFields(visit, s); });
}

template <typename M, typename Fields>
std::vector<char> encodeMessage(MessageKind kind, const M& m, Fields fields) {
  Writer w(kind);
  fields(w, m);
  return w.take();
}

template <typename M, typename Fields>
M decodeMessage(const std::vector<char>& payload, MessageKind kind, const char* what, Fields fields) {
  Reader r(payload, kind, what);
  M m;
  fields(r, m);
  return m;
}

}  // namespace

std::vector<char> encode(const Hello& m) {
  return encodeMessage(MessageKind::kHello, m, [](auto& visit, auto& x) { helloFields(visit, x); });
}

Hello decodeHello(const std::vector<char>& payload) {
  return decodeMessage<Hello>(payload, MessageKind::kHello, "hello",
                              [](auto& visit, auto& x) { helloFields(visit, x); });
}

std::vector<char> encode(const RequestBatch& m) {
  return encodeMessage(MessageKind::kRequests, m, [](auto& visit, auto& x) { requestBatchFields(visit, x); });
}

RequestBatch decodeRequestBatch(const std::vector<char>& payload) {
  auto m = decodeMessage<RequestBatch>(payload, MessageKind::kRequests, "request batch",
                                       [](auto& visit, auto& x) { requestBatchFields(visit, x); });
  HVD_CHECK(m.waiting_sets.size() == m.waiting_names.size(), BackendError, "corrupt request batch (",
            m.waiting_sets.size(), " waiting sets, ", m.waiting_names.size(), " names)");
  return m;
}

std::vector<char> encode(const ResponseList& m) {
  return encodeMessage(MessageKind::kResponses, m,
                       [](auto& visit, auto& x) { responseListFields(visit, x); });
}

ResponseList decodeResponseList(const std::vector<char>& payload) {
  auto m = decodeMessage<ResponseList>(payload, MessageKind::kResponses, "response list",
                                       [](auto& visit, auto& x) { responseListFields(visit, x); });
  HVD_CHECK(m.path <= ResponseList::kPathHierarchical, BackendError, "corrupt response list (path ",
            int{m.path}, ")");
  return m;
}

}  // namespace hvd::runtime
