// Host plans: where the ranks run ("where to run", kept apart from "how to start": the Launcher).
//
// Sources, in hvdrun's order: -H, --hostfile, a Slurm allocation (SLURM_JOB_NODELIST), else localhost:np.
// Every parser throws UsageError with a one-line message naming the offending token (and file:line for
// hostfiles). Pure functions, no I/O except reading the hostfile.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/slot.h"

#include "launcher/launcher.h"

namespace hvd::launcher {

// -H "host[:slots][,...]": items are trimmed; `user@host`, `[ipv6]` and `[ipv6]:slots` are accepted;
// slots default to 1 (horovodrun requires ":slots"). Hosts named twice are merged (slots added, first
// position kept) so every host has one local scope.
// `default_slots` applies to entries written without ":slots" (--slots-per-host).
std::vector<HostSpec> parseHostList(const std::string& spec, int default_slots = 1);

// Hostfile text in horovodrun's format ("host slots=N") or Open MPI's ("host [slots=N] [max_slots=M]",
// "# comments", blank lines). `origin` names the file in messages ("hosts.txt:3: ...").
std::vector<HostSpec> parseHostfileText(const std::string& text, const std::string& origin);
// Reads and parses a hostfile; UsageError naming the path and errno text when it cannot be read.
std::vector<HostSpec> parseHostfile(const std::string& path);

// The output of an elastic job's --host-discovery-script, in horovodrun's format: one host per line,
// "host:N" (N slots) or "host" (slots_per_host slots); surrounding whitespace and blank lines are ignored,
// and empty output means no hosts yet. Where horovodrun is vague or fails, this is strict and says why:
//   - hosts keep the order of their first line (horovodrun: the order of a Python set, arbitrary), so the
//     same output always gives the same ranks;
//   - a line repeated as it is counts once; the same host with two different slot counts is an error
//     naming both lines (horovodrun: either count, at random);
//   - "[ipv6]:N" and "user@host:N" are accepted (horovodrun cannot parse them);
//   - a bare "host" without slots_per_host is an error naming the line (horovodrun: a TypeError at start).
// Errors are UsageError naming "discovery output line L" and the line.
std::vector<HostSpec> parseDiscoveryOutput(const std::string& text, std::optional<int> slots_per_host);

// Slurm's compressed node list: "node[01-04,07],gpu1,rack[1-2]-n[1-2]" (zero padding kept).
std::vector<std::string> expandSlurmNodelist(const std::string& nodelist);
// SLURM_TASKS_PER_NODE: "2(x3),1" -> {2, 2, 2, 1}.
std::vector<int> expandSlurmTasksPerNode(const std::string& tasks);
// Hosts of a Slurm allocation. `tasks_per_node` may be empty (one slot per node); otherwise it must
// describe every node.
std::vector<HostSpec> slurmHosts(const std::string& nodelist, const std::string& tasks_per_node);

// One rank's place, horovodrun's SlotInfo.
struct Placement : SlotInfo {
  HostSpec host;
};

// horovodrun's get_host_assignments with max_np = np: ranks fill hosts in order; cross_rank is the index
// of the host among those having a slot at this local_rank (order of first appearance). Starts exactly
// `np` ranks (horovodrun starts one per slot). Throws UsageError when np < 1 or np exceeds the slots.
std::vector<Placement> assignRanks(const std::vector<HostSpec>& hosts, int np);

// The rendezvous scope sizes of a plan: "global" -> size, "local_<host>" -> local_size,
// "cross_<local_rank>" -> cross_size (rendezvous::Server::setScopeSizes).
std::map<std::string, int> scopeSizes(const std::vector<Placement>& plan);

// "host" or "user@host", with IPv6 literals bracketed; for messages.
std::string displayName(const HostSpec& host);

}  // namespace hvd::launcher
