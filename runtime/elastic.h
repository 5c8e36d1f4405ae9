// Elastic jobs in libhvd (docs/elastic.md): joining a round at init, and noticing during init that the
// round is over.
//
// A round is one membership of the job, begun by hvdrun's driver on the rendezvous server. A process
// starts in the round of HVD_ELASTIC_ROUND; after hvd_shutdown() its next hvd_init() takes its slot's
// place in the first round after the one it left (Runtime::nextElasticRound). A round can end while a
// process is still initializing in it: a peer it waits for died (the driver began a round without it)
// or went on to a later round. Then the server refuses the old round's keys (410), and the init joins
// the next round instead of failing or waiting out its timeout.
//
// Threading: start() blocks the calling thread; RoundWatchStore is safe from any thread (as every Store).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>

#include "base/error.h"
#include "rendezvous/http_store.h"
#include "rendezvous/store.h"
#include "runtime/options.h"
#include "runtime/runtime.h"

namespace hvd::runtime::elastic {

// Init's round ended before every rank of it arrived: a later round has begun.
class RoundOverError : public StoreError {
 public:
  using StoreError::StoreError;
};

// The store of an elastic job's init: the round's scopes (rendezvous::RoundStore over the server's
// HttpStore), whose waits ask the server every kCheckInterval whether a later round has begun and then
// throw RoundOverError. Without it a rank waiting for a peer of an ended round would wait out the elastic
// timeout for a peer that will never come to this round.
class RoundWatchStore final : public rendezvous::Store {
 public:
  static constexpr std::chrono::milliseconds kCheckInterval{1000};

  RoundWatchStore(uint64_t round, std::shared_ptr<rendezvous::HttpStore> server);

  void set(const std::string& key, const rendezvous::Bytes& value) override;
  std::optional<rendezvous::Bytes> tryGet(const std::string& key) override;
  // Waits in slices of kCheckInterval; between them, RoundOverError once a later round has begun.
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  void deleteKey(const std::string& key) override;
  bool check(const std::vector<std::string>& keys) override;
  std::string describe() const override;

  // True when the server has begun a round after this one (false when it cannot tell).
  bool over();

 private:
  uint64_t round_;
  std::shared_ptr<rendezvous::HttpStore> server_;
  rendezvous::RoundStore scoped_;
};

// Starts the runtime described by options. A static job: as Runtime(options, Runtime::makeStore(options)).
// An elastic job: with `after`, this slot's place in the first round after it first; then, while init
// fails because its round is over (a later round has begun), the slot's place in the next round, until
// options.elastic_timeout has passed since the call. A slot left out of a round is a BackendError (the job
// went on without it); a failure in a round that is not over is rethrown as it is.
std::unique_ptr<Runtime> start(RuntimeOptions options, std::optional<uint64_t> after);

}  // namespace hvd::runtime::elastic
