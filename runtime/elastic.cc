#include "runtime/elastic.h"

#include <algorithm>

#include "runtime/log.h"

namespace hvd::runtime::elastic {

using Clock = std::chrono::steady_clock;

RoundWatchStore::RoundWatchStore(uint64_t round, std::shared_ptr<rendezvous::HttpStore> server)
    : round_(round), server_(server), scoped_(round, std::move(server)) {}

void RoundWatchStore::set(const std::string& key, const rendezvous::Bytes& value) { scoped_.set(key, value); }
std::optional<rendezvous::Bytes> RoundWatchStore::tryGet(const std::string& key) { return scoped_.tryGet(key); }
int64_t RoundWatchStore::add(const std::string& key, int64_t delta) { return scoped_.add(key, delta); }
void RoundWatchStore::deleteKey(const std::string& key) { scoped_.deleteKey(key); }
bool RoundWatchStore::check(const std::vector<std::string>& keys) { return scoped_.check(keys); }
std::string RoundWatchStore::describe() const { return scoped_.describe(); }

void RoundWatchStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    try {
      scoped_.wait(keys, std::clamp(left, std::chrono::milliseconds(0), kCheckInterval));
      return;
    } catch (const RendezvousTimeout&) {
      if (Clock::now() >= deadline) throw;
    }
    if (over()) {
      throw RoundOverError(detail::concat("elastic round ", round_, " ended while ", describe(),
                                          " waited for key(s) ", rendezvous::formatKeys(keys),
                                          ": the driver has begun a later round"));
    }
  }
}

bool RoundWatchStore::over() {
  try {
    return server_->roundNews(round_).round > round_;
  } catch (const StoreError&) {
    return false;  // the server cannot say (not an elastic job's): the wait goes on to its timeout
  }
}

std::unique_ptr<Runtime> start(RuntimeOptions options, std::optional<uint64_t> after) {
  if (!options.elastic) return std::make_unique<Runtime>(options, Runtime::makeStore(options));
  const auto timeout = options.elastic_timeout;
  const auto deadline = Clock::now() + timeout;
  // The next round's place, waiting no longer than what is left of the call's elastic timeout. Asked with
  // the options as given (the environment's), whose slot names this process in every round.
  const RuntimeOptions given = options;
  auto next = [&](uint64_t previous, bool until_taken_in = false) {
    RuntimeOptions limited = given;
    const auto left = std::chrono::ceil<std::chrono::seconds>(deadline - Clock::now());
    limited.elastic_timeout = std::max(left, std::chrono::seconds(1));
    RuntimeOptions joined = Runtime::nextElasticRound(std::move(limited), previous, until_taken_in);
    joined.elastic_timeout = timeout;
    return joined;
  };
  // A standby process's first init passes over rounds that leave its slot out: they began before the driver
  // knew the process was ready, which it learns from this very request.
  if (after) options = next(*after, options.elastic_standby && options.elastic_round == *after);
  for (;;) {
    try {
      return std::make_unique<Runtime>(options, Runtime::makeStore(options));
    } catch (const UsageError&) {
      throw;
    } catch (const Error& e) {
      // A 410 for a key of this round, a peer that went on to a later round, a peer that died (the driver
      // begins a round without it): whichever way init failed, a later round is where to go now.
      const bool over = dynamic_cast<const RoundOverError*>(&e) != nullptr ||
                        RoundWatchStore(options.elastic_round, Runtime::server(options)).over();
      // A peer that died during init: the driver begins a round without it once it has seen the exit, which
      // may be after this process noticed. Waiting for that round is what a failed collective would do.
      const bool peer_lost = dynamic_cast<const PeerLostError*>(&e) != nullptr;
      if (!over && !peer_lost) throw;
      if (Clock::now() >= deadline) {
        throw RendezvousTimeout(detail::concat("elastic round ", options.elastic_round,
                                               " ended during init and no later round could be joined within ",
                                               timeout.count(), " s (HOROVOD_ELASTIC_TIMEOUT): ", e.what()));
      }
      logLine(options.log_level, LogLevel::kWarning, options.rank,
              detail::concat("init: elastic round ", options.elastic_round,
                             " is over before init finished; joining the next round (", e.what(), ")"));
      try {
        options = next(options.elastic_round);
      } catch (const RendezvousTimeout& timeout_error) {
        throw RendezvousTimeout(detail::concat(timeout_error.what(), " (after init in round ", options.elastic_round,
                                               " failed: ", e.what(), ")"));
      }
    }
  }
}

}  // namespace hvd::runtime::elastic
