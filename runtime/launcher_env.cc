#include "runtime/launcher_env.h"

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <map>
#include <sstream>
#include <unistd.h>

#include "base/error.h"
#include "rendezvous/store.h"

namespace hvd::runtime {
namespace {

std::optional<std::string> value(const Getenv& getenv, const char* name) {
  const char* v = getenv(name);
  if (!v || !*v) return std::nullopt;  // empty counts as unset, as for every other variable
  return std::string(v);
}

int parseInt(const char* name, const std::string& text, int min) {
  errno = 0;
  char* end = nullptr;
  const long long x = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || end == text.c_str() || *end != '\0') {
    throw UsageError(detail::concat(name, "='", text, "' is not an integer"));
  }
  if (x < min || x > (1 << 24)) {
    throw UsageError(detail::concat(name, "=", x, " is out of range [", min, ", ", 1 << 24, "]"));
  }
  return static_cast<int>(x);
}

// The variables of one launcher: rank and size (both or neither), local rank and local size (both or
// neither, and only with a rank).
struct Names {
  Launcher launcher;
  const char* rank;
  const char* size;
  const char* local_rank;
  const char* local_size;
};

std::optional<LauncherIdentity> readLauncher(const Getenv& getenv, const Names& n) {
  const auto rank = value(getenv, n.rank), size = value(getenv, n.size);
  const auto local_rank = value(getenv, n.local_rank), local_size = value(getenv, n.local_size);
  if (!rank && !size && !local_rank && !local_size) return std::nullopt;
  std::string described;
  auto describe = [&](const char* name, const std::optional<std::string>& v) {
    if (!v) return;
    described += detail::concat(described.empty() ? "" : ", ", name, "=", *v);
  };
  describe(n.rank, rank);
  describe(n.size, size);
  describe(n.local_rank, local_rank);
  describe(n.local_size, local_size);
  const char* name = launcherName(n.launcher);
  if (!rank || !size) {
    throw UsageError(detail::concat(name, "'s variables are incomplete: ", described, " but ",
                                    !rank && !size ? detail::concat(n.rank, " and ", n.size, " are")
                                    : rank         ? detail::concat(n.size, " is")
                                                   : detail::concat(n.rank, " is"),
                                    " not set"));
  }
  if (static_cast<bool>(local_rank) != static_cast<bool>(local_size)) {
    throw UsageError(detail::concat(name, "'s variables are incomplete: ", described, " but ",
                                    local_rank ? n.local_size : n.local_rank, " is not set"));
  }
  LauncherIdentity id;
  id.launcher = n.launcher;
  id.described = described;
  id.rank = parseInt(n.rank, *rank, 0);
  id.size = parseInt(n.size, *size, 1);
  if (id.rank >= id.size) {
    throw UsageError(detail::concat(n.rank, "=", id.rank, " is not below ", n.size, "=", id.size));
  }
  if (local_rank) {
    id.local_rank = parseInt(n.local_rank, *local_rank, 0);
    id.local_size = parseInt(n.local_size, *local_size, 1);
    id.local_rank_var = n.local_rank;
    id.local_size_var = n.local_size;
    if (id.local_rank >= id.local_size) {
      throw UsageError(detail::concat(n.local_rank, "=", id.local_rank, " is not below ", n.local_size, "=",
                                      id.local_size));
    }
    if (id.local_size > id.size) {
      throw UsageError(detail::concat(n.local_size, "=", id.local_size, " exceeds ", n.size, "=", id.size));
    }
  }
  return id;
}

// Slurm's step ids from SLURM_MAX_NORMAL_STEP_ID (0xfffffff0) up name the batch, extern, interactive and
// pending steps, whose processes are no srun tasks.
constexpr unsigned long long kMaxNormalStep = 0xfffffff0ull;

std::optional<LauncherIdentity> readSlurm(const Getenv& getenv) {
  const char* step_var = "SLURM_STEP_ID";
  auto step = value(getenv, step_var);
  if (!step) step = value(getenv, step_var = "SLURM_STEPID");
  if (!step) return std::nullopt;  // no step: a batch or salloc shell
  if (*step == "batch" || *step == "extern" || *step == "interactive") return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const unsigned long long step_id = std::strtoull(step->c_str(), &end, 10);
  if (errno != 0 || end == step->c_str() || *end != '\0' || (*step)[0] == '-') {
    throw UsageError(detail::concat(step_var, "='", *step, "' is not a Slurm step id"));
  }
  if (step_id > kMaxNormalStep) return std::nullopt;
  const auto procid = value(getenv, "SLURM_PROCID"), ntasks = value(getenv, "SLURM_NTASKS");
  if (!procid || !ntasks) {
    std::string described = detail::concat(step_var, "=", *step);
    if (procid) described += ", SLURM_PROCID=" + *procid;
    if (ntasks) described += ", SLURM_NTASKS=" + *ntasks;
    throw UsageError(detail::concat("srun's variables are incomplete: ", described, " (a task of a job step) but ",
                                    !procid && !ntasks ? "SLURM_PROCID and SLURM_NTASKS are"
                                    : procid           ? "SLURM_NTASKS is"
                                                       : "SLURM_PROCID is",
                                    " not set"));
  }
  LauncherIdentity id;
  id.launcher = Launcher::kSlurm;
  id.rank = parseInt("SLURM_PROCID", *procid, 0);
  id.size = parseInt("SLURM_NTASKS", *ntasks, 1);
  id.described = detail::concat("SLURM_PROCID=", *procid, ", SLURM_NTASKS=", *ntasks);
  if (id.rank >= id.size) {
    throw UsageError(detail::concat("SLURM_PROCID=", id.rank, " is not below SLURM_NTASKS=", id.size));
  }
  if (auto local = value(getenv, "SLURM_LOCALID")) {
    id.local_rank = parseInt("SLURM_LOCALID", *local, 0);
    id.local_rank_var = "SLURM_LOCALID";
    id.described += ", SLURM_LOCALID=" + *local;
  }
  if (auto node = value(getenv, "SLURM_NODEID")) {
    id.node = parseInt("SLURM_NODEID", *node, 0);
    id.node_var = "SLURM_NODEID";
    id.described += ", SLURM_NODEID=" + *node;
  }
  id.job = value(getenv, "SLURM_JOB_ID").value_or("") + "." + *step;
  return id;
}

std::string listRanks(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i == 8) return out + ", ... (" + std::to_string(ranks.size()) + " in all)";
    out += (i ? ", " : "") + std::to_string(ranks[i]);
  }
  return out;
}

constexpr const char* kHostNameSource = "HOROVOD_HOSTNAME, else SLURMD_NODENAME, else the system's host name";

// An entry as published: its fields, one a line, the host name last.
std::string encode(const HostEntry& e) {
  return detail::concat(e.local_rank, "\n", e.local_size, "\n", e.node, "\n", e.local_rank_var, "\n",
                        e.local_size_var, "\n", e.node_var, "\n", e.host);
}

HostEntry decode(const std::string& text, const std::string& key) {
  std::istringstream in(text);
  HostEntry e;
  std::string field[6];
  for (auto& f : field) {
    if (!std::getline(in, f)) throw StoreError(detail::concat("malformed host entry at ", key, ": '", text, "'"));
  }
  try {
    e.local_rank = std::stoi(field[0]);
    e.local_size = std::stoi(field[1]);
    e.node = std::stoi(field[2]);
  } catch (const std::exception&) {
    throw StoreError(detail::concat("malformed host entry at ", key, ": '", text, "'"));
  }
  e.local_rank_var = field[3];
  e.local_size_var = field[4];
  e.node_var = field[5];
  std::getline(in, e.host, '\0');
  return e;
}

std::string text(const rendezvous::Bytes& b) { return std::string(b.begin(), b.end()); }
rendezvous::Bytes bytes(const std::string& s) { return rendezvous::Bytes(s.begin(), s.end()); }

}  // namespace

const char* launcherName(Launcher launcher) {
  switch (launcher) {
    case Launcher::kOpenMpi: return "Open MPI";
    case Launcher::kPmi: return "Hydra (PMI)";
    case Launcher::kSlurm: return "srun";
  }
  return "?";
}

std::optional<LauncherIdentity> launcherIdentity(const Getenv& getenv) {
  auto ompi = readLauncher(getenv, {Launcher::kOpenMpi, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                                    "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"});
  auto pmi = readLauncher(getenv, {Launcher::kPmi, "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"});
  auto slurm = readSlurm(getenv);
  if (ompi && pmi && (ompi->rank != pmi->rank || ompi->size != pmi->size)) {
    throw UsageError(detail::concat("the variables of two launchers disagree: Open MPI's ", ompi->described,
                                    " but Hydra (PMI)'s ", pmi->described));
  }
  if (ompi) {
    if (auto job = value(getenv, "OMPI_MCA_ess_base_jobid")) ompi->job = "ompi" + *job;
    return ompi;
  }
  if (pmi) {
    if (auto job = value(getenv, "PMI_JOBID")) pmi->job = "pmi" + *job;
    return pmi;
  }
  return slurm;
}

std::string launcherHostName(const Getenv& getenv) {
  if (auto h = value(getenv, "HOROVOD_HOSTNAME")) return *h;
  if (auto h = value(getenv, "SLURMD_NODENAME")) return *h;
  char name[HOST_NAME_MAX + 1] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0 || !name[0]) {
    throw UsageError(detail::concat("cannot read this machine's host name (", errnoText(errno),
                                    "): set HOROVOD_HOSTNAME"));
  }
  return name;
}

std::vector<HostNumbers> numberByHost(const std::vector<HostEntry>& entries) {
  const int size = static_cast<int>(entries.size());
  std::vector<HostNumbers> out(entries.size());
  std::map<std::string, std::vector<int>> by_host;
  for (int r = 0; r < size; ++r) {
    auto& ranks = by_host[entries[r].host];
    out[r].local_rank = static_cast<int>(ranks.size());
    ranks.push_back(r);
  }
  std::map<int, int> by_local_rank;  // local rank -> ranks with it so far
  for (int r = 0; r < size; ++r) {
    out[r].local_size = static_cast<int>(by_host[entries[r].host].size());
    int& seen = by_local_rank[out[r].local_rank];
    out[r].cross_rank = seen;
    ++seen;
  }
  for (int r = 0; r < size; ++r) out[r].cross_size = by_local_rank[out[r].local_rank];

  // What the launchers said must describe the same hosts.
  std::map<std::string, int> node_of_host;
  std::map<int, int> first_rank_of_node;
  for (int r = 0; r < size; ++r) {
    const HostEntry& e = entries[r];
    const bool rank_differs = e.local_rank >= 0 && e.local_rank != out[r].local_rank;
    const bool size_differs = e.local_size >= 0 && e.local_size != out[r].local_size;
    if (rank_differs || size_differs) {
      std::string said = e.local_rank >= 0 ? detail::concat(e.local_rank_var, "=", e.local_rank) : "";
      if (e.local_size >= 0) said += detail::concat(said.empty() ? "" : " and ", e.local_size_var, "=", e.local_size);
      throw UsageError(detail::concat(
          "the launcher and the host names disagree: rank ", r, " has ", said, ", but host name '", e.host,
          "' (", kHostNameSource, ") is shared by rank(s) ", listRanks(by_host[e.host]), ", which makes it local rank ",
          out[r].local_rank, " of ", out[r].local_size, "; every host needs a name of its own (HOROVOD_HOSTNAME)"));
    }
    if (e.node < 0) continue;
    auto [host_it, new_host] = node_of_host.emplace(e.host, e.node);
    auto [node_it, new_node] = first_rank_of_node.emplace(e.node, r);
    if (!new_host && host_it->second != e.node) {
      throw UsageError(detail::concat("the launcher and the host names disagree: host name '", e.host, "' (",
                                      kHostNameSource, ") is shared by rank ", by_host[e.host].front(), " with ",
                                      e.node_var, "=", host_it->second, " and rank ", r, " with ", e.node_var, "=",
                                      e.node, "; every host needs a name of its own (HOROVOD_HOSTNAME)"));
    }
    if (!new_node && entries[node_it->second].host != e.host) {
      throw UsageError(detail::concat("the launcher and the host names disagree: ", e.node_var, "=", e.node,
                                      " for rank ", node_it->second, " with host name '",
                                      entries[node_it->second].host, "' and rank ", r, " with host name '", e.host,
                                      "' (", kHostNameSource, "); one node needs one name"));
    }
  }
  return out;
}

HostNumbers exchangeHosts(rendezvous::Store& store, const std::string& scope, int rank, int size,
                          const HostEntry& mine, std::chrono::milliseconds timeout) {
  HVD_CHECK(mine.host.find('\n') == std::string::npos, UsageError, "the host name '", mine.host,
            "' holds a line break (HOROVOD_HOSTNAME)");
  if (size == 1) return numberByHost({mine}).front();
  const std::string own = scope + "/" + std::to_string(rank), hosts_key = scope + "/hosts";
  store.set(own, bytes(encode(mine)));
  std::string table;
  if (rank == 0) {
    std::vector<std::string> keys;
    for (int r = 0; r < size; ++r) keys.push_back(scope + "/" + std::to_string(r));
    try {
      store.wait(keys, timeout);
    } catch (const RendezvousTimeout& e) {
      throw RendezvousTimeout(detail::concat("init: rank 0 waited for every rank's host name: ", e.what()));
    }
    std::vector<HostEntry> entries;
    for (const auto& key : keys) {
      auto v = store.tryGet(key);
      HVD_CHECK(v.has_value(), StoreError, "host entry ", key, " vanished from ", store.describe());
      entries.push_back(decode(text(*v), key));
    }
    try {
      numberByHost(entries);
      table = "ok";
      for (const auto& e : entries) table += "\n" + e.host;
    } catch (const UsageError& e) {
      table = std::string("error\n") + e.what();
    }
    store.set(hosts_key, bytes(table));
  } else {
    try {
      table = text(store.get(hosts_key, timeout));
    } catch (const RendezvousTimeout& e) {
      throw RendezvousTimeout(detail::concat("init: rank 0 did not publish the job's host names within ",
                                             timeout.count(), " ms (it has not reached hvd_init, or it waits for "
                                             "other ranks): ", e.what()));
    }
  }
  // Rank 0 has read every entry once the table exists; the table goes when every rank has read it.
  store.deleteKey(own);
  if (store.add(scope + "/read", 1) == size) {
    store.deleteKey(hosts_key);
    store.deleteKey(scope + "/read");
  }
  if (table.rfind("error\n", 0) == 0) throw UsageError(table.substr(6));
  HVD_CHECK(table.rfind("ok", 0) == 0, StoreError, "malformed host table at ", hosts_key, ": '", table, "'");
  std::vector<HostEntry> hosts;
  std::istringstream in(table.substr(2));
  std::string line;
  std::getline(in, line);  // the rest of the "ok" line
  while (std::getline(in, line)) {
    HostEntry e;
    e.host = line;
    hosts.push_back(std::move(e));
  }
  HVD_CHECK(static_cast<int>(hosts.size()) == size, StoreError, "the host table at ", hosts_key, " names ",
            hosts.size(), " ranks, not ", size);
  return numberByHost(hosts)[rank];
}

}  // namespace hvd::runtime
