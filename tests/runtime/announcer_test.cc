// The announcement protocol of negotiation-free cached operations (runtime/announcer.h over the words of
// runtime/shm/announcements.h), model-checked: every interleaving of two and of three members that submit
// operations (announcing a response cache hit, or sending it, a changed one or a join to the coordinator),
// answer for each other, catch up, and die, is explored, and in every state reached:
//   - no member ran a different operation than another at the same position (the members' sequences of
//     operations run, agreed or negotiated, are prefixes of one another);
//   - a member that concludes "agreed" for round n saw every member's word of round n hold its value, and
//     every member settles round n alike: the others that have not settled it yet announced the same value
//     in it (an agreed round's data rounds are run by all members together);
//   - a member with an open announcement settles it by its own steps alone, whatever the others do or fail to
//     do (dead members included): nobody waits on anybody;
// and, so that the checks cannot pass for want of the cases, every outcome (agreed, refused, an announcement
// too late for its round, an answer for oneself) is reached.
//
// A step is one call of shm::Announcements (Announcer's methods make exactly one each), or an action of the
// runtime around it that touches no word (a submission, the coordinator's answer). Announcements' calls are
// atomic steps as the other members see them (announcements.h says why), so this interleaving is the
// protocol's, run on the production code over words in ordinary memory. That atomicity itself (the
// compare-and-swap of a member's own announcement against an answer for it) is what the shared-memory test
// "a member's own announcement and an answer given for it at the same moment, one lands" races for real. The
// coordinator is the model's: it answers an operation once every member submitted it (or joined), and every
// member runs its answers in order; a member's busy word is shown before its operation can be answered, as
// the runtime shows it.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <string>
#include <unordered_set>
#include <vector>

#include "runtime/announcer.h"
#include "runtime/shm/announcements.h"

using hvd::runtime::Announcer;
using hvd::runtime::shm::Announcements;
using hvd::runtime::shm::AnnouncementWords;

namespace {

// What a member submits: a response cache hit of name A or B (announced with the name's cache id), name A
// with a changed descriptor (never announced), or a join.
enum Op : uint8_t { kNone = 0, kA = 1, kB = 2, kAChanged = 3, kJoin = 4 };
constexpr uint8_t kJoinDone = 9;  // what every member runs when all of them joined
uint8_t nameOf(Op op) { return op == kAChanged ? kA : op; }

enum class Mode : uint8_t {
  kIdle,        // nothing pending: may submit its next operation
  kAnnouncing,  // its operation is announced
  kSubmitted,   // its operation (or join) is at the coordinator, not answered yet
  kAnswered,    // answered: runs what the coordinator sent, then is idle
};

struct Member {
  Announcer announcer;
  Mode mode = Mode::kIdle;
  Op op = kNone;
  uint8_t submitted = 0;                           // operations submitted so far
  bool busy_shown = false;                         // what its busy word says
  bool joined = false;                             // its join is at the coordinator
  bool dead = false;                               // takes no more steps
  std::deque<uint8_t> runs;                        // names the coordinator answered, not run yet
  std::string ran;                                 // names run, agreed or negotiated, in order
  std::vector<std::pair<uint32_t, bool>> settled;  // the rounds it settled, and whether agreed
};

constexpr int kMaxMembers = 3;

struct World {
  std::vector<uint64_t> words;  // per member: its two words, busy, read
  std::vector<Member> members;
  int deaths = 0;

  std::string key() const {
    std::string k(reinterpret_cast<const char*>(words.data()), words.size() * sizeof(uint64_t));
    for (const Member& m : members) {
      const auto s = m.announcer.state();
      k.append(reinterpret_cast<const char*>(s.data()), s.size() * sizeof(uint32_t));
      for (const auto& [round, agreed] : m.settled) {
        k.append(reinterpret_cast<const char*>(&round), sizeof round);
        k += static_cast<char>(agreed);
      }
      k += {static_cast<char>(m.mode),
            static_cast<char>(m.op),
            static_cast<char>(m.submitted),
            static_cast<char>(m.busy_shown),
            static_cast<char>(m.joined),
            static_cast<char>(m.dead),
            '|'};
      k.append(m.runs.begin(), m.runs.end());
      k += '|';
      k += m.ran;
      k += '#';
    }
    return k;
  }
};

struct Config {
  int size = 2;
  int max_ops = 3;                                // operations each member submits at most
  int max_deaths = 1;                             // members that may die
  uint32_t start = 0;                             // the round complete when the group starts
  std::vector<Op> ops{kA, kB, kAChanged, kJoin};  // what members submit
};

struct Counts {
  uint64_t states = 0;
  uint64_t agreed = 0;
  uint64_t refused = 0;
  uint64_t late = 0;  // own announcements too late for their round (answered for already)
  uint64_t self_answers = 0;
  uint64_t negotiated = 0;
};

// Runs f on a shm::Announcements for member over the world's words, and stores the words back.
template <typename F>
auto onBoard(World& w, int member, F&& f) {
  const int n = static_cast<int>(w.members.size());
  AnnouncementWords cells[kMaxMembers];
  for (int r = 0; r < n; ++r) {
    for (int p = 0; p < 2; ++p) cells[r].word[p].store(w.words[4 * r + p]);
    cells[r].busy.store(static_cast<uint32_t>(w.words[4 * r + 2]));
    cells[r].read.store(static_cast<uint32_t>(w.words[4 * r + 3]));
  }
  Announcements board(cells, n, member);
  auto restore = [&] {
    for (int r = 0; r < n; ++r) {
      for (int p = 0; p < 2; ++p) w.words[4 * r + p] = cells[r].word[p].load();
      w.words[4 * r + 2] = cells[r].busy.load();
      w.words[4 * r + 3] = cells[r].read.load();
    }
  };
  if constexpr (std::is_void_v<decltype(f(board))>) {
    f(board);
    restore();
  } else {
    auto result = f(board);
    restore();
    return result;
  }
}

World start(const Config& c) {
  World w;
  w.words.assign(4 * static_cast<size_t>(c.size), 0);
  for (int r = 0; r < c.size; ++r) {
    w.members.push_back(Member{Announcer(c.start)});
    onBoard(w, r, [&](Announcements& b) { b.reset(c.start); });
  }
  return w;
}

bool prefixes(const std::string& a, const std::string& b) {
  const size_t n = std::min(a.size(), b.size());
  return a.compare(0, n, b, 0, n) == 0;
}

void checkRan(const World& w) {
  for (const Member& a : w.members) {
    for (const Member& b : w.members) {
      INFO("a member ran '" << a.ran << "', another '" << b.ran << "'");
      REQUIRE(prefixes(a.ran, b.ran));
    }
  }
}

// Settling, with may_answer always true (the grace can always have passed), from `from`: concluded within a
// bounded number of this member's own steps.
void checkSettlesAlone(const World& from, int i) {
  World w = from;
  Member& m = w.members[i];
  for (int steps = 0; steps < 4 * static_cast<int>(w.members.size()) + 4; ++steps) {
    const auto s =
        onBoard(w, i, [&](Announcements& b) { return m.announcer.settleStep(b, [](int) { return true; }); });
    if (s == Announcer::Settle::kAgreed || s == Announcer::Settle::kRefused) return;
    REQUIRE(s == Announcer::Settle::kOpen);
  }
  FAIL("member " << i << " did not settle its announcement by its own steps");
}

// The coordinator: once every member submitted (the same name, or a join) with its busy word shown, all of
// them get the answer. With every member joined, the join completes.
bool coordinatorAnswers(World& w) {
  uint8_t name = 0;
  bool all_joined = true;
  for (const Member& m : w.members) {
    if (m.dead || m.mode != Mode::kSubmitted || !m.busy_shown) return false;
    if (m.joined) continue;
    all_joined = false;
    if (name && nameOf(m.op) != name) return false;  // a mismatch: the real coordinator reports a stall
    name = nameOf(m.op);
  }
  for (Member& m : w.members) {
    m.runs.push_back(all_joined ? kJoinDone : name);
    if (all_joined || !m.joined) m.mode = Mode::kAnswered;
  }
  return true;
}

class Explorer {
 public:
  explicit Explorer(Config c) : c_(c) {}

  Counts run() {
    std::vector<World> stack{start(c_)};
    seen_.insert(stack.back().key());
    while (!stack.empty()) {
      World w = std::move(stack.back());
      stack.pop_back();
      ++counts_.states;
      checkRan(w);
      for (int i = 0; i < c_.size; ++i) {
        if (w.members[i].mode == Mode::kAnnouncing && !w.members[i].dead) checkSettlesAlone(w, i);
      }
      successors(w, stack);
    }
    return counts_;
  }

 private:
  void push(World w, std::vector<World>& stack) {
    // A round before every live member's next one is settled by no one any more: its records are checked
    // against nothing, and kept they would only tell apart states that behave alike.
    uint32_t first = 0;
    bool any = false;
    for (const Member& m : w.members) {
      if (m.dead) continue;
      if (!any || static_cast<int32_t>(m.announcer.nextRound() - first) < 0) first = m.announcer.nextRound();
      any = true;
    }
    for (Member& m : w.members) {
      std::erase_if(m.settled,
                    [&](const auto& e) { return !any || static_cast<int32_t>(e.first - first) < 0; });
    }
    if (seen_.insert(w.key()).second) stack.push_back(std::move(w));
  }

  void successors(const World& w, std::vector<World>& stack) {
    for (int i = 0; i < c_.size; ++i) {
      const Member& m = w.members[i];
      if (m.dead) continue;
      if (w.deaths < c_.max_deaths) {
        World next = w;
        next.members[i].dead = true;
        ++next.deaths;
        push(std::move(next), stack);
      }
      if (!m.announcer.announcing()) {
        // Catching up, then publishing what it read: in every progress() of the runtime.
        World next = w;
        if (onBoard(next, i, [&](Announcements& b) { return next.members[i].announcer.catchUpStep(b); })) {
          push(std::move(next), stack);
        }
        if (m.announcer.readBehind()) {
          World read = w;
          onBoard(read, i, [&](Announcements& b) { read.members[i].announcer.publishRead(b); });
          push(std::move(read), stack);
        }
      }
      if (m.mode == Mode::kIdle && m.submitted < c_.max_ops) submit(w, i, stack);
      if (m.mode == Mode::kAnnouncing) settle(w, i, stack);
      if (m.busy_shown && !m.announcer.announcing()) {
        // Its own "no" once asked, as the runtime gives it. The look and the answer are one step here: what
        // the look finds (another member's word holds the next round) stays so until this member has read
        // that round, so no interleaving between them can change the answer.
        World next = w;
        Member& n = next.members[i];
        const bool asked = onBoard(next, i, [&](Announcements& b) {
          for (int r = 0; r < c_.size; ++r) {
            if (n.announcer.asked(b, r)) return true;
          }
          return false;
        });
        if (asked && onBoard(next, i, [&](Announcements& b) { return n.announcer.answerNo(b); })) {
          ++counts_.self_answers;
          push(std::move(next), stack);
        }
      }
      if (m.mode == Mode::kSubmitted && !m.busy_shown) {
        World next = w;
        onBoard(next, i, [](Announcements& b) { b.setBusy(true); });
        next.members[i].busy_shown = true;
        push(std::move(next), stack);
      }
      if (!m.runs.empty()) runAnswer(w, i, stack);
    }
    World next = w;
    if (coordinatorAnswers(next)) {
      ++counts_.negotiated;
      push(std::move(next), stack);
    }
  }

  void submit(const World& w, int i, std::vector<World>& stack) {
    for (Op op : c_.ops) {
      World next = w;
      Member& m = next.members[i];
      m.op = op;
      ++m.submitted;
      if (op == kA || op == kB) {
        // Announcing (the runtime's choice when no peer looks busy), or straight to the coordinator.
        World announced = next;
        Member& a = announced.members[i];
        if (onBoard(announced, i, [&](Announcements& b) { return a.announcer.announce(b, op); })) {
          a.mode = Mode::kAnnouncing;
        } else {
          ++counts_.late;
          a.mode = Mode::kSubmitted;
        }
        push(std::move(announced), stack);
      }
      m.mode = Mode::kSubmitted;
      m.joined = op == kJoin;
      push(std::move(next), stack);
    }
  }

  void settle(const World& w, int i, std::vector<World>& stack) {
    World next = w;
    Member& m = next.members[i];
    const auto s = onBoard(
        next, i, [&](Announcements& b) { return m.announcer.settleStep(b, [](int) { return true; }); });
    REQUIRE(s != Announcer::Settle::kWaiting);
    if (s == Announcer::Settle::kAgreed || s == Announcer::Settle::kRefused) {
      // Every member settling the round concludes alike: an agreed round is run by all members together.
      const uint32_t round = m.announcer.completeRound();
      const bool agreed = s == Announcer::Settle::kAgreed;
      for (int r = 0; r < c_.size; ++r) {
        const Member& o = next.members[r];
        if (r == i) continue;
        const auto other =
            std::find_if(o.settled.begin(), o.settled.end(), [&](const auto& e) { return e.first == round; });
        INFO("member " << i << " settled round " << round << (agreed ? " as agreed" : " as refused")
                       << "; member " << r);
        if (other != o.settled.end()) {
          REQUIRE(other->second == agreed);
        } else if (agreed) {
          // Not settled yet: it announced the same value in this round, and is alive or dead with it.
          REQUIRE(o.announcer.announcing());
          REQUIRE(o.announcer.nextRound() == round);
          REQUIRE(o.announcer.value() == m.announcer.value());
        }
      }
      m.settled.emplace_back(round, agreed);
    }
    if (s == Announcer::Settle::kAgreed) {
      const uint32_t round = m.announcer.completeRound();
      for (int r = 0; r < c_.size; ++r) {
        const auto value = onBoard(next, i, [&](Announcements& b) { return b.announced(r, round); });
        INFO("member " << i << " agreed on " << m.announcer.value() << " in round " << round << "; member "
                       << r << "'s word");
        REQUIRE(value == m.announcer.value());
      }
      ++counts_.agreed;
      m.ran += static_cast<char>(m.op);
      m.mode = Mode::kIdle;
      m.op = kNone;
    } else if (s == Announcer::Settle::kRefused) {
      ++counts_.refused;
      m.mode = Mode::kSubmitted;  // its operation goes to the coordinator
    }
    push(std::move(next), stack);
  }

  void runAnswer(const World& w, int i, std::vector<World>& stack) {
    World next = w;
    Member& m = next.members[i];
    m.ran += static_cast<char>(m.runs.front());
    m.runs.pop_front();
    if (m.mode == Mode::kAnswered && m.runs.empty()) {
      // Its operation completed: nothing at the coordinator any more (the runtime clears the busy word then).
      m.mode = Mode::kIdle;
      m.op = kNone;
      m.joined = false;
      m.busy_shown = false;
      onBoard(next, i, [](Announcements& b) { b.setBusy(false); });
    }
    push(std::move(next), stack);
  }

  Config c_;
  Counts counts_;
  std::unordered_set<std::string> seen_;
};

void explore(const Config& c) {
  const Counts n = Explorer(c).run();
  INFO(c.size << " members, " << c.max_ops << " operations each, rounds from " << c.start << ": " << n.states
              << " states; " << n.agreed << " agreed, " << n.refused << " refused, " << n.late
              << " too late, " << n.self_answers << " own answers, " << n.negotiated << " negotiated");
  // The checks ran on every outcome.
  CHECK(n.agreed > 0);
  CHECK(n.refused > 0);
  CHECK(n.late > 0);
  CHECK(n.self_answers > 0);
  CHECK(n.negotiated > 0);
}

}  // namespace

TEST_CASE("announcements: every interleaving of two members keeps their operations the same", "[announcer]") {
  explore(Config{2, 3, 1, 0});
}

TEST_CASE("announcements: every interleaving of two members across the wrap-around of round numbers",
          "[announcer]") {
  explore(Config{2, 3, 1, UINT32_MAX - 2});
}

TEST_CASE("announcements: every interleaving of three members, one operation each, of every kind",
          "[announcer]") {
  explore(Config{3, 1, 1, 0});
}

TEST_CASE("announcements: every interleaving of three members, two operations each, cached or changed",
          "[announcer]") {
  Config c{3, 2, 1, 0};
  c.ops = {kA, kAChanged};
  explore(c);
}
