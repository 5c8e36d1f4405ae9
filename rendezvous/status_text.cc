#include "rendezvous/status_text.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>

#include "base/error.h"
#include "rendezvous/status_page.h"

namespace hvd::rendezvous {

namespace {

const char* const kReplacement = "\xEF\xBF\xBD";  // U+FFFD in UTF-8

// The number of bytes of a valid UTF-8 sequence at text[i], or 0 when the bytes there are not one.
size_t utf8SequenceAt(std::string_view text, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(text[i + k]); };
  const unsigned char c = b(0);
  if (c < 0x80) return 1;
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the allowed range of the second byte (Unicode's table 3-7)
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c == 0xE0) {
    n = 3, lo = 0xA0;
  } else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) {
    n = 3;
  } else if (c == 0xED) {
    n = 3, hi = 0x9F;  // no surrogates
  } else if (c == 0xF0) {
    n = 4, lo = 0x90;
  } else if (c >= 0xF1 && c <= 0xF3) {
    n = 4;
  } else if (c == 0xF4) {
    n = 4, hi = 0x8F;  // nothing past U+10FFFF
  } else {
    return 0;
  }
  if (i + n > text.size()) return 0;
  if (b(1) < lo || b(1) > hi) return 0;
  for (size_t k = 2; k < n; ++k) {
    if (b(k) < 0x80 || b(k) > 0xBF) return 0;
  }
  return n;
}

}  // namespace

void appendNumber(std::string& out, double number) {
  if (std::isnan(number)) {
    out += "NaN";
    return;
  }
  if (std::isinf(number)) {
    out += number > 0 ? "+Inf" : "-Inf";
    return;
  }
  char buf[64];
  if (number == std::floor(number) && std::fabs(number) < 1e18) {
    // Counters and byte counts as integers ("6291456", not "6.291456e+06").
    auto [end, ec] = std::to_chars(buf, buf + sizeof buf, static_cast<int64_t>(number));
    out.append(buf, ec == std::errc() ? end : buf);
    return;
  }
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, number, std::chars_format::general);
  out.append(buf, ec == std::errc() ? end : buf);
}

std::string number(double value) {
  std::string out;
  appendNumber(out, value);
  return out;
}

std::string formatDuration(double seconds) {
  const auto s = static_cast<int64_t>(std::max(0.0, std::floor(seconds)));
  if (s < 60) return detail::concat(s, " s");
  if (s < 3600) return detail::concat(s / 60, " min ", s % 60, " s");
  return detail::concat(s / 3600, " h ", (s % 3600) / 60, " min");
}

std::string formatRate(double rate) {
  char buf[64];
  std::snprintf(buf, sizeof buf, rate < 10 && rate != std::floor(rate) ? "%.1f" : "%.0f", rate);
  return buf;
}

std::string formatRanks(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  std::string out;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!out.empty()) out += ", ";
    out += std::to_string(ranks[i]);
    if (j > i) out += detail::concat(j == i + 1 ? ", " : "-", ranks[j]);
    i = j + 1;
  }
  return out;
}

std::string signalName(int signal) {
  const char* abbrev = ::sigabbrev_np(signal);
  return abbrev ? std::string("SIG") + abbrev : detail::concat("signal ", signal);
}

std::string stateText(const WorkerView& w) {
  if (w.state == WorkerState::kExited) {
    if (w.signal) return detail::concat("killed by ", signalName(*w.signal), " (", *w.signal, ")");
    if (w.exit_code) return detail::concat("exited ", *w.exit_code);
    return "exited";
  }
  if (w.state == WorkerState::kRunning && w.report && w.report->state == "shutdown") return "running (shut down)";
  return toString(w.state);
}

bool failed(const WorkerView& w) {
  return w.state == WorkerState::kExited && (w.signal || (w.exit_code && *w.exit_code != 0));
}

std::vector<const CollectiveWait*> holdUps(const JobSnapshot& s, const WorkerView& w) {
  std::vector<const CollectiveWait*> out;
  if (!w.stuck) return out;
  const double stuck_after = std::chrono::duration<double>(Monitor::kStuckAfter).count();
  for (const auto& wait : s.waits) {
    if (wait.seconds >= stuck_after && std::count(wait.missing.begin(), wait.missing.end(), w.rank)) {
      out.push_back(&wait);
    }
  }
  return out;
}

std::string holdUpText(const CollectiveWait& wait) {
  return detail::concat(wait.op, " '", wait.name, "' waits for this rank for ", formatDuration(wait.seconds));
}

std::string validUtf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const size_t n = utf8SequenceAt(text, i);
    if (n == 0) {
      out += kReplacement;
      ++i;
    } else {
      out.append(text.substr(i, n));
      i += n;
    }
  }
  return out;
}

std::string htmlEscape(std::string_view text) {
  const std::string valid = validUtf8(text);
  std::string out;
  out.reserve(valid.size() + valid.size() / 8);
  for (char c : valid) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default:
        if ((static_cast<unsigned char>(c) < 0x20 && c != '\t') || c == 0x7f) {
          out += kReplacement;
        } else {
          out += c;
        }
    }
  }
  return out;
}

}  // namespace hvd::rendezvous
