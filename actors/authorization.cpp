#include "actors/authorization.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <stdexcept>

#include <caf/atom.hpp>
#include <caf/message_view.hpp>
#include <caf/scheduled_actor.hpp>
#include <caf/sec.hpp>
#include <caf/type_erased_tuple.hpp>

#include "actors/wire.hpp"
#include "messages/envelope.hpp"
#include "net/auth.hpp"

namespace archipelago::actors {

using namespace archipelago::messages;

const char* to_string(Refusal refusal) {
  switch (refusal) {
    case Refusal::unauthenticated: return "unauthenticated";
    case Refusal::wrong_key: return "wrong_key";
    case Refusal::kind_not_allowed: return "kind_not_allowed";
    case Refusal::foreign_learner: return "foreign_learner";
    case Refusal::malformed: return "malformed";
  }
  return "unknown";
}

bool node_may_send(caf::atom_value role, const Message& body) {
  if (role == syncer_name()) {
    return std::holds_alternative<Join>(body) || std::holds_alternative<FragmentUpdate>(body) ||
           std::holds_alternative<Leave>(body);
  }
  if (role == store_name()) return std::holds_alternative<Fetch>(body);
  if (role == monitor_name()) {
    return std::holds_alternative<Heartbeat>(body) || std::holds_alternative<Leave>(body) ||
           std::holds_alternative<SlotReport>(body);
  }
  return false;
}

std::string random_key() {
  std::array<unsigned char, 16> bytes{};
  const int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  size_t got = 0;
  while (fd >= 0 && got < bytes.size()) {
    const ssize_t n = ::read(fd, bytes.data() + got, bytes.size() - got);
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  if (fd >= 0) ::close(fd);
  if (got != bytes.size()) throw std::runtime_error("cannot read 16 random bytes from /dev/urandom");
  std::string hex;
  char two[3];
  for (unsigned char b : bytes) {
    std::snprintf(two, sizeof two, "%02x", b);
    hex += two;
  }
  return hex;
}

const std::string& process_key() {
  static const std::string key = random_key();
  return key;
}

bool keys_equal(const std::string& a, const std::string& b) { return !a.empty() && net::tokens_equal(a, b); }

void Refusals::refuse(const std::string& actor, const std::string& kind, Refusal reason, spdlog::logger& log,
                      const std::string& detail) {
  int64_t n = 0;
  {
    std::lock_guard lock(mutex_);
    by_reason_[to_string(reason)] += 1;
    n = ++by_kind_[actor + " " + kind + " " + to_string(reason)];
  }
  if (n == 1) {
    log.warn("{} refused a '{}' message: {}{}{} (counted; logged once per actor, kind and reason)", actor, kind,
             to_string(reason), detail.empty() ? "" : ": ", detail);
  }
}

int64_t Refusals::total() const {
  std::lock_guard lock(mutex_);
  int64_t n = 0;
  for (const auto& [_, c] : by_reason_) n += c;
  return n;
}

int64_t Refusals::count(Refusal reason) const {
  std::lock_guard lock(mutex_);
  auto it = by_reason_.find(to_string(reason));
  return it == by_reason_.end() ? 0 : it->second;
}

nlohmann::json Refusals::to_json() const {
  std::lock_guard lock(mutex_);
  nlohmann::json reasons = nlohmann::json::object();
  for (auto r : {Refusal::unauthenticated, Refusal::wrong_key, Refusal::kind_not_allowed, Refusal::foreign_learner,
                 Refusal::malformed}) {
    auto it = by_reason_.find(to_string(r));
    reasons[to_string(r)] = it == by_reason_.end() ? 0 : it->second;
  }
  int64_t total = 0;
  for (const auto& [_, c] : by_reason_) total += c;
  return {{"total", total}, {"by_reason", reasons}, {"by_kind", by_kind_}};
}

void refuse_unmatched(caf::scheduled_actor* self, std::string actor, std::shared_ptr<Refusals> refusals,
                      std::shared_ptr<spdlog::logger> log) {
  self->set_default_handler([actor = std::move(actor), refusals, log](caf::scheduled_actor*, caf::message_view& x)
                                -> caf::result<caf::message> {
    refusals->refuse(actor, message_kind(x.content()), Refusal::unauthenticated, *log);
    return caf::sec::unexpected_message;
  });
}

std::string message_kind(const caf::type_erased_tuple& message) {
  if (message.empty()) return "(empty)";
  if (message.match_element<caf::atom_value>(0)) return caf::to_string(message.get_as<caf::atom_value>(0));
  return "(a message without a leading atom)";
}

namespace {
std::atomic<bool> drill_hooks_on{false};
}  // namespace

void set_drill_hooks(bool on) { drill_hooks_on = on; }
bool drill_hooks() { return drill_hooks_on; }

}  // namespace archipelago::actors
