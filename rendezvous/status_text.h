// Text the status port's renderers share (status_html.cc, status_json.cc, status_metrics.cc): numbers,
// durations and rank lists as people and Prometheus read them, and a worker's state and hold-ups as the page
// and the JSON say them. validUtf8 and htmlEscape, which the tests use too, are declared in status_page.h.
// Pure functions of their arguments: safe from any thread; none throws but for allocation.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/job_monitor.h"

namespace hvd::rendezvous {

// Appends `number` as Prometheus and people read it: integers as integers, others in the shortest form
// that reads back as the same double ("0.25", "0.0001", "1e-07").
void appendNumber(std::string& out, double number);

// appendNumber's text as a string.
std::string number(double value);

// "12 s", "3 min 4 s", "2 h 5 min" (the page's script formats the same way).
std::string formatDuration(double seconds);

// "35", "2.5" (rates below 10 with one decimal).
std::string formatRate(double rate);

// "0-3, 5, 7-8": sorted ranks with runs folded.
std::string formatRanks(std::vector<int> ranks);

// "SIGKILL", or "signal N" for a number without a name.
std::string signalName(int signal);

// The state as a person reads it: "running", "exited 0", "killed by SIGKILL (9)".
std::string stateText(const WorkerView& w);

// Exited with a signal or a non-zero code.
bool failed(const WorkerView& w);

// The waits a stuck worker holds up, as the page says them.
std::vector<const CollectiveWait*> holdUps(const JobSnapshot& s, const WorkerView& w);

// One hold-up as the page says it: "allreduce 'grad' waits for this rank for 3 s".
std::string holdUpText(const CollectiveWait& wait);

}  // namespace hvd::rendezvous
