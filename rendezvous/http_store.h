// Store over the rendezvous server's HTTP protocol (client side, used by every worker).
//
// Key "scope/name" is the URL "/scope/name". wait() uses the server's multi-key long poll
// (POST /<scope>?wait_ms=) so clients do not poll every 10 ms as Horovod's do, and waitAndGet() its
// multi-key fetch (&values=1: every value in one answer); against a server without them (Horovod's answers
// 501) they fall back to polling and to one GET per key. Connection failures are retried with backoff until the call's deadline (the server may not
// be up yet); the final error names the server, the scope, the keys still missing and, for Gloo's
// numeric keys, the ranks they belong to.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "rendezvous/round.h"
#include "rendezvous/store.h"

namespace hvd::rendezvous {

struct StoreOptions {
  std::string host;   // IPv4/IPv6 literal or name
  uint16_t port = 0;
  std::optional<std::string> token;  // sent as "X-Hvd-Token" when set
  std::chrono::milliseconds connect_timeout{5000};
  // Retries of a failed connection: first delay, doubling up to max, until the operation deadline.
  std::chrono::milliseconds retry_initial{10};
  std::chrono::milliseconds retry_max{500};
  std::chrono::milliseconds request_deadline{Store::kDefaultTimeout};  // for set/get/add/delete
};

class HttpStore final : public Store {
 public:
  explicit HttpStore(StoreOptions options);
  ~HttpStore() override;

  void set(const std::string& key, const Bytes& value) override;
  std::optional<Bytes> tryGet(const std::string& key) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  ValueList waitAndGet(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  // Asks for the slices only (&range=); against a server without that extension, fetches whole values
  // and slices them here.
  ValueList waitAndGet(const std::vector<std::string>& keys, std::chrono::milliseconds timeout,
                       ValueRange range) override;
  int64_t add(const std::string& key, int64_t delta) override;
  void deleteKey(const std::string& key) override;
  std::string describe() const override;

  // Elastic jobs: the place of `slot` ("<host>:<local_rank>") in the first round after `after`, waiting up
  // to `timeout` for the driver to begin it (GET /rank_and_size, rendezvous/handler.h). A slot left out of
  // that round gets -1 in every field. Throws RendezvousTimeout when no such round began in time, and
  // StoreError when the job is not elastic (404) or the answer is malformed.
  struct RoundPlace {
    uint64_t round = 0;
    SlotAssignment slot;
  };
  RoundPlace nextRound(const std::string& slot, uint64_t after, std::chrono::milliseconds timeout);

  // Elastic jobs: the rounds begun after `since` (GET /round_news, rendezvous/handler.h) -- how a worker
  // learns between steps that the driver re-formed the job. Does not wait. Throws StoreError when the job
  // is not elastic (404) or the answer is malformed.
  RoundNews roundNews(uint64_t since);

  // Sends this worker's report for the status port (PUT /_hvd/report/<rank>, base/job_monitor.h), giving up after
  // `timeout`: a report is a sample, the next one replaces it, so a request that was sent is not sent again.
  // Returns false when the server answers 404 (it takes no reports); throws StoreError on other failures.
  bool sendReport(int rank, const std::string& json, std::chrono::milliseconds timeout);

 private:
  ValueList fetch(const std::vector<std::string>& keys, std::chrono::milliseconds timeout,
                  std::optional<ValueRange> range);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hvd::rendezvous
