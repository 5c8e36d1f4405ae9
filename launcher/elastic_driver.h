// The elastic job's driver (what runElasticJob runs; launcher/elastic.h describes the job): a Supervisor
// that keeps rounds of workers going while workers die and hosts come and go. Its definitions are split by
// concern:
//   elastic.cc          the job's run, worker exits, reconciling what runs with what should run (rounds),
//                       teardown
//   elastic_workers.cc  starting, stopping and replacing workers; a worker's failure; round requests
//   elastic_hosts.cc    the hosts: the discovery script and its results, usable hosts, blacklisting
// Where a round's processes go is pure and separate (launcher/elastic_plan.h).
// Errors: the constructor and run() throw what the supervisor's setup throws; a failing job ends with
// RunResult::error set. Threading: everything on the io_context's thread, which run() runs; not reentrant.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/steady_timer.hpp>

#include "launcher/cli.h"
#include "launcher/elastic.h"
#include "launcher/elastic_plan.h"
#include "launcher/host_plan.h"
#include "launcher/launcher.h"
#include "launcher/supervisor.h"

namespace hvd::launcher {

// HVD_DISCOVERY_TIMEOUT_SECONDS in `env`, else kDefaultDiscoveryTimeout. Throws UsageError for a value that
// is not a number of seconds from 1 to 86400.
std::chrono::seconds discoveryTimeout(const Environment& env);

class ElasticDriver : public Supervisor {
 public:
  // `discovery_timeout`: discoveryTimeout(inherited), checked before the supervisor takes the signals.
  ElasticDriver(const HvdrunOptions& options, const std::vector<HostSpec>& fixed_hosts,
                const Environment& inherited, std::chrono::seconds discovery_timeout);

  RunResult run();
  void onExit(int id, const ExitStatus& status) override;

 private:
  using Clock = std::chrono::steady_clock;

  struct HostState {
    HostSpec spec;
    bool listed = true;  // in the latest discovery output (always, for fixed hosts)
    std::optional<Clock::time_point> blacklisted_until;  // time_point::max(): for good
    int blacklist_count = 0;
    std::string blacklist_reason;
    std::deque<Clock::time_point> failures;  // within kFailureWindow
  };

  struct WorkerRec {
    std::string slot;
    std::string host;
    int rank = -1;  // in the round it last took part in
    std::unique_ptr<Worker> worker;
    bool ended = false;
    bool removed = false;  // stopped by the driver: left out of a round
    bool standby = false;  // started outside a round; a member once a round takes it in
    bool ready = false;    // standby and asking for its place
    bool replacement = false;  // standby for a slot whose member was lost (its return is not a new reset)
    uint64_t since = 0;        // the round it became a member in
  };

  // The discovery script's process: its stdout is the host list, its stderr goes to hvdrun's stderr.
  class DiscoveryEvents : public WorkerEvents {
   public:
    explicit DiscoveryEvents(ElasticDriver& d) : d_(d) {}
    void onOutput(int, Stream stream, std::string_view bytes) override {
      if (stream == Stream::kStdout) {
        out_.append(bytes);
      } else {
        d_.message(Stream::kStderr, bytes);
      }
    }
    void onStreamClosed(int, Stream) override {}
    void onExit(int, const ExitStatus& status) override { d_.discoveryEnded(status, std::move(out_)); }

   private:
    ElasticDriver& d_;
    std::string out_;
  };

  // ---- messages and outcome (elastic.cc)

  std::string hostsSeen() const;
  void fail(const std::string& why);
  bool anyRunning() const;

  // ---- hosts and discovery (elastic_hosts.cc)

  void addHost(const HostSpec& spec);
  HostState* findHost(const std::string& name);
  std::vector<HostSpec> usableHosts();
  void blacklist(HostState& h, const std::string& reason);
  void runDiscovery();
  void discoveryEnded(const ExitStatus& status, std::string out);
  void updateHosts(const std::vector<HostSpec>& found);

  // ---- reconciling what runs with what should run (elastic.cc)

  void tick();
  void settleThenReconcile();
  std::vector<std::string> survivors() const;
  bool roundFormed() const;
  bool memberLost() const;
  void reconcile();
  void beginFinishing(const WorkerRec& done);
  static const char* ordinalSuffix(int n);
  std::string lostSummary() const;
  void recordLoss(std::string what);
  void belowMinimum(size_t usable);
  void prepareFirstRound(const std::vector<Placement>& plan);
  void beginRound(const std::vector<ElasticPlace>& plan, bool counted);

  // ---- workers (elastic_workers.cc)

  void stopWorker(WorkerRec& w);
  void startStandby(const std::vector<HostSpec>& hosts, const std::string& slot);
  void startWorker(const Placement& p, const std::string& slot, int index, bool member);
  void workerFailed(int id, WorkerRec& w, const ExitStatus& status);
  void roundRequested(const std::string& slot);

  // ---- teardown (the supervisor's rules, as for a static job; elastic.cc)

  void signalAll(int signo) override;
  void stopTimers() override;
  std::string describeRunning() const override { return "the job"; }
  void killAfterGrace() override;
  void stopAll(int signo) override;

  const HvdrunOptions::Elastic& elastic_;
  const Environment& inherited_;
  const std::chrono::seconds discovery_timeout_;
  std::string cwd_;
  boost::asio::steady_timer tick_timer_;
  boost::asio::steady_timer settle_timer_;
  boost::asio::steady_timer below_timer_;
  boost::asio::steady_timer discovery_timer_;
  std::set<std::string> slots_started_;  // slots that had a process: starting another there is a restart
  // Destroyed before the base's launchers: workers (kill what still runs) first.
  std::unique_ptr<Launcher> discovery_launcher_;
  std::unique_ptr<DiscoveryEvents> discovery_events_;
  std::unique_ptr<Worker> discovery_;
  std::map<int, WorkerRec> workers_;  // by worker id (the output tag)
  std::vector<HostState> hosts_;      // in the order they first appeared
  std::vector<std::string> members_;      // the current round's slots, in rank order
  std::map<std::string, int> member_ids_;  // the current round's slots -> their processes
  bool reform_requested_ = false;          // a member asked for a round after the current one
  bool growth_stopped_ = false;            // --reset-limit reached: no more processes are taken in
  std::map<std::string, int> live_;   // slot -> its live worker
  std::deque<std::string> lost_;     // what the job lost, for failure messages
  size_t lost_earlier_ = 0;         // losses no longer in lost_
  static constexpr size_t kLostKept = 16;
  std::optional<Clock::time_point> below_since_;
  std::string discovery_problem_;
  bool discovery_timed_out_ = false;
  uint64_t round_ = 0;
  int resets_ = 0;
  bool finishing_ = false;
};

}  // namespace hvd::launcher
